// Fault tolerance across real processes: a 2-worker job on a 3-worker cluster survives
// three killed workers, a worker stalled until the job recovered without it, and a killed
// and restarted coordinator, each at a random step, and ends with the parameters of an
// undisturbed run, bit for bit (each recovery replays the steps since the last snapshot
// from the coordinator's plan).
#include <signal.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "core/testing.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {
namespace {

v1::JobSpec ChaosSpec(const std::string& request_id) {
  v1::JobSpec spec;
  spec.mutable_model()->set_kind("mlp");
  spec.mutable_model()->add_hidden(1024);
  spec.mutable_model()->add_hidden(1024);
  spec.mutable_model()->set_dropout_rate(0.1);  // the replay must also redraw the same masks
  spec.mutable_optimizer()->set_kind("adam");
  spec.mutable_optimizer()->set_learning_rate(1e-3);
  spec.set_global_batch_size(256);
  spec.set_steps(420);
  spec.set_workers(2);
  spec.mutable_eval()->set_every_steps(100);
  spec.mutable_recovery()->set_snapshot_every_steps(50);
  spec.mutable_recovery()->set_max_restarts(10);
  spec.set_request_id(request_id);
  return spec;
}

TEST(Chaos, AJobSurvivesKilledWorkersAStallAndACoordinatorRestartBitForBit) {
  auto cluster = LocalCluster::Start(3);
  ASSERT_OK(cluster);
  LocalCluster& c = **cluster;

  // Undisturbed.
  ASSERT_OK_AND_ASSIGN(v1::Job clean, c.Submit(ChaosSpec("clean")));
  ASSERT_OK_AND_ASSIGN(v1::Job clean_done, c.WaitFor(clean.id(), absl::Minutes(10)));
  ASSERT_EQ(clean_done.state(), v1::SUCCEEDED) << clean_done.failure_reason();

  // The same job, with faults at random steps (seeded: a failure can be replayed).
  std::mt19937 rng(11);
  auto at = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int kill1 = at(20, 80), restart = at(110, 160), kill2 = at(190, 240);
  const int kill3 = at(270, 320), stall = at(340, 390);
  ASSERT_OK_AND_ASSIGN(v1::Job job, c.Submit(ChaosSpec("chaos")));
  auto kill_at = [&](int step) {
    ASSERT_OK(c.WaitForStep(job.id(), step, absl::Minutes(5)));
    ASSERT_OK_AND_ASSIGN(int victim, c.WorkerOf(job.id()));
    c.KillWorker(victim);
    ASSERT_OK(c.AddWorker());  // a spare for the next recovery
  };
  kill_at(kill1);
  ASSERT_OK(c.WaitForStep(job.id(), restart, absl::Minutes(5)));
  ASSERT_OK(c.RestartCoordinator());
  kill_at(kill2);
  kill_at(kill3);
  // Last, as the job may well end while the worker is stopped.
  ASSERT_OK(c.WaitForStep(job.id(), stall, absl::Minutes(5)));
  ASSERT_OK_AND_ASSIGN(int stalled, c.WorkerOf(job.id()));
  c.SignalWorker(stalled, SIGSTOP);
  // The job goes on without it (past the step deadline, or its heartbeats): it recovers
  // onto the spare; the watch replays the history, so only a recovery after the stall's
  // step counts.
  bool past_stall = false;
  ASSERT_OK(c.WatchUntil(job.id(), absl::Minutes(5), [&](const v1::JobEvent& e) {
    if (e.has_step() && e.step().step() >= stall) past_stall = true;
    return past_stall && e.has_state() && e.state().state() == v1::RECOVERING;
  }));
  c.SignalWorker(stalled, SIGCONT);

  ASSERT_OK_AND_ASSIGN(v1::Job done, c.WaitFor(job.id(), absl::Minutes(10)));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << "\n" << c.Logs();
  EXPECT_GE(done.recoveries(), 5);  // three kills, the restart, the stall
  EXPECT_EQ(done.param_checksum(), clean_done.param_checksum())
      << "faults at steps " << kill1 << ", " << stall << ", " << restart << ", " << kill2 << ", "
      << kill3;
}

}  // namespace
}  // namespace lockstep::testing
