// The replay audit (docs/audit.md) against real replicas in this process: a job the shard
// audit cannot cover (one worker) is replayed by a free worker alone, or by the
// coordinator's own replica when none is free, from its last verified snapshot to each
// snapshot and to its end; a liar is caught and the job ends with the undisturbed checksum.

#include "services/coordinator/jobs/replay_audit.h"

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/spec/testing.h"
#include "core/status_macros.h"
#include "core/testing.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_testing.h"
#include "services/standalone/audit_testing.h"
#include "services/standalone/coordinator_replica.h"
#include "services/standalone/testing.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

TEST(ReplayAudit, AOneWorkerJobIsReplayedByAFreeWorkerAndEndsBitForBit) {
  const v1::JobSpec spec = OneWorker(20);
  ASSERT_EQ(spec.audit().every_steps(), 100u);  // on by default
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, Undisturbed(spec));
  InProcessWorkers workers(2);
  SparedRun run = RunWithSpares(workers, spec, "one");
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->param_checksum, clean.param_checksum);
  EXPECT_EQ(run.out->audits, 4);  // the snapshots of steps 5, 10, 15, and the end
  EXPECT_EQ(run.out->audits_failed, 0);
  EXPECT_EQ(run.out->recoveries, 0);
  ASSERT_EQ(run.notes.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    EXPECT_THAT(run.notes[k], HasSubstr(absl::StrCat("replay audit of step ", 5 * k + 5,
                                                     ": passed: worker w1 replayed "
                                                     "steps ",
                                                     5 * k + 1, " to ", 5 * k + 5,
                                                     " alone from the state of step ", 5 * k,
                                                     ": params checksum")));
  }
}

TEST(ReplayAudit, AOneWorkerLiarIsCaughtAndTheJobEndsWithTheUndisturbedChecksum) {
  const v1::JobSpec spec = OneWorker(20);
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, Undisturbed(spec));
  SparedRun run = RunWithLiar(3, 0, spec, "one-liar");  // w0 the job's; w1, w2 free
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->param_checksum, clean.param_checksum);
  EXPECT_EQ(run.out->recoveries, 1);
  EXPECT_EQ(run.out->audits_failed, 1);
  EXPECT_TRUE(run.out->quarantined.empty());
  ASSERT_EQ(run.reasons.size(), 1u);
  EXPECT_THAT(run.reasons[0], HasSubstr("replay audit of step 5 failed: worker w1 replayed steps "
                                        "1 to 5 from the state of step 0 alone and got params "
                                        "checksum"));
  EXPECT_THAT(run.reasons[0],
              HasSubstr("nobody can tell which lied, so worker w0 is replaced and w1 checks this "
                        "job no more (none quarantined); the job rolls back to step 0, its last "
                        "verified snapshot (or start)"));
  // Replaced by w1, the job is checked by w2 from then on.
  EXPECT_THAT(run.notes.back(), HasSubstr("replay audit of step 20: passed: worker w2"));
}

TEST(ReplayAudit, WithoutAFreeWorkerTheReplayIsSkippedAndTheEventsSaySo) {
  const v1::JobSpec spec = OneWorker(10);
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, Undisturbed(spec));
  InProcessWorkers workers(1);
  SparedRun run = RunWithSpares(workers, spec, "alone");
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->param_checksum, clean.param_checksum);
  EXPECT_EQ(run.out->audits, 0);
  EXPECT_EQ(run.notes, (std::vector<std::string>{
                           "replay audit of step 5: skipped: no free worker of equal threads",
                           "replay audit of step 10: skipped: no free worker of equal threads"}));
}

// The coordinator's own replica (coordinator_replica.h), reading datasets from `roots` (by
// default the workers' default data roots) with at most 2 threads and `mb` MiB.
std::unique_ptr<CoordinatorReplica> Replica(const char* roots = kDefaultDataRoots,
                                            uint64_t mb = 512) {
  absl::StatusOr<DataRoots> parsed = DataRoots::Parse(roots);
  EXPECT_OK(parsed.status());
  return std::make_unique<CoordinatorReplica>(*std::move(parsed), "", 2, mb << 20);
}

TEST(ReplayAudit, WithoutAFreeWorkerTheCoordinatorsReplicaReplaysAndTheJobEndsBitForBit) {
  const v1::JobSpec spec = OneWorker(10);
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, Undisturbed(spec));
  InProcessWorkers workers(1);
  std::unique_ptr<CoordinatorReplica> replica = Replica();
  SparedRun run = RunWithSpares(workers, spec, "local", replica.get());
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->param_checksum, clean.param_checksum);
  EXPECT_EQ(run.out->audits, 2);
  EXPECT_EQ(run.out->audits_failed, 0);
  ASSERT_EQ(run.notes.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    EXPECT_THAT(run.notes[k], HasSubstr(absl::StrCat(
                                  "replay audit of step ", 5 * k + 5,
                                  ": passed: the coordinator's replica replayed steps ", 5 * k + 1,
                                  " to ", 5 * k + 5, " alone from the state of step ", 5 * k)));
  }
  // A free worker is still preferred.
  InProcessWorkers two(2);
  run = RunWithSpares(two, spec, "local-spare", replica.get());
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->param_checksum, clean.param_checksum);
  ASSERT_EQ(run.notes.size(), 2u);
  EXPECT_THAT(run.notes[0], HasSubstr("replay audit of step 5: passed: worker w1 replayed"));
}

// Stands for the coordinator's replica: records the nice value of the thread that prepares
// it, and refuses to prepare.
class NiceProbe final : public WorkerClient {
 public:
  explicit NiceProbe(int* nice) : nice_(nice) {}
  absl::StatusOr<PrepareResult> Prepare(const JobAssignment&, std::shared_ptr<const SharedState>,
                                        const CancelToken&, absl::Duration) override {
    *nice_ = getpriority(PRIO_PROCESS, 0);  // this thread's
    return absl::UnavailableError("a probe");
  }
  absl::StatusOr<std::unique_ptr<StepStream>> OpenSteps(const std::string&, const CancelToken&,
                                                        absl::Duration) override {
    return absl::UnimplementedError("a probe");
  }
  absl::StatusOr<EvalSums> Evaluate(const std::string&, int64_t, int64_t, const CancelToken&,
                                    absl::Duration) override {
    return absl::UnimplementedError("a probe");
  }
  absl::StatusOr<TrainState> FetchState(const std::string&, const CancelToken&,
                                        absl::Duration) override {
    return absl::UnimplementedError("a probe");
  }
  absl::Status Release(const std::string&, const std::string&, absl::Duration) override {
    return absl::OkStatus();
  }
  bool Alive(absl::Duration) override { return true; }

 private:
  int* nice_;
};

// The replay on the coordinator's replica runs niced below the control plane (its threads
// inherit it from the replay's); the job's thread keeps its priority.
TEST(ReplayAudit, TheCoordinatorsReplicaReplaysAtALoweredPriority) {
  SpareSupply supply({}, 0);
  CancelToken attempt;
  ReplayAuditor auditor(nullptr, &supply, CoordinatorOptions(), &attempt);
  const int before = getpriority(PRIO_PROCESS, 0);
  int nice = -100;
  ReplayRequest request;
  request.job_id = "probe";
  request.to = 5;
  auditor.StartLocal(std::make_unique<NiceProbe>(&nice), request);
  const ReplayVerdict v = auditor.Wait();
  EXPECT_TRUE(v.local);
  EXPECT_THAT(v.status.message(), HasSubstr("a probe"));
  EXPECT_EQ(nice, std::min(19, before + kLocalReplicaNice));
  EXPECT_EQ(getpriority(PRIO_PROCESS, 0), before);
}

// The coordinator is trusted (the single writer of the job's state): where its own replica
// disagrees, the job's one worker lied. It is quarantined and replaced, and the job rolls
// back to its last verified snapshot.
TEST(ReplayAudit, ALiarWithNoFreeWorkerIsCaughtByTheCoordinatorsReplicaAndQuarantined) {
  const v1::JobSpec spec = OneWorker(5);  // replayed at its end
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, Undisturbed(spec));
  InProcessWorkers workers(2);  // w0 the job's, w1 its replacement (never lent)
  workers.slot(0).SetGradientFaultForTesting(Double);
  std::unique_ptr<CoordinatorReplica> replica = Replica();
  SparedRun run = RunWithSpares(workers, spec, "local-liar", replica.get(), /*lend=*/false);
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->param_checksum, clean.param_checksum);
  EXPECT_EQ(run.out->recoveries, 1);
  EXPECT_EQ(run.out->audits_failed, 1);
  EXPECT_EQ(run.quarantined, std::vector<std::string>{"w0"});
  ASSERT_EQ(run.reasons.size(), 1u);
  EXPECT_THAT(run.reasons[0],
              HasSubstr("replay audit of step 5 failed: the coordinator's replica replayed steps 1 "
                        "to 5 from the state of step 0 alone and got params checksum"));
  EXPECT_THAT(run.reasons[0],
              HasSubstr("; the coordinator is trusted, so worker w0 lied: it is quarantined and "
                        "replaced; the job rolls back to step 0, its last verified snapshot"));
  ASSERT_FALSE(run.notes.empty());
  EXPECT_THAT(run.notes.back(),
              HasSubstr("replay audit of step 5: passed: the coordinator's replica"));
}

// A replica that cannot read the job's dataset (here: outside its data roots), or whose
// memory the replay would exceed, skips it, and the events say why.
TEST(ReplayAudit, TheCoordinatorsReplicaSkipsWhatItCannotTakeSayingWhy) {
  const v1::JobSpec spec = OneWorker(5);
  InProcessWorkers workers(1);
  std::unique_ptr<CoordinatorReplica> unread = Replica("/data");
  SparedRun run = RunWithSpares(workers, spec, "local-unread", unread.get());
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->audits, 0);
  EXPECT_EQ(run.notes, std::vector<std::string>{
                           "replay audit of step 5: skipped: no free worker of equal threads, and "
                           "the coordinator's replica cannot replay it: dataset.path: "
                           "\"/usr/share/datasets/fashion-mnist\" is outside the data roots "
                           "(/data)"});
  std::unique_ptr<CoordinatorReplica> small = Replica(kDefaultDataRoots, 1);
  run = RunWithSpares(workers, spec, "local-small", small.get());
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->audits, 0);
  ASSERT_EQ(run.notes.size(), 1u);
  EXPECT_THAT(run.notes[0], HasSubstr("the coordinator's replica cannot replay it: the replay "
                                      "needs about "));
  EXPECT_THAT(run.notes[0],
              HasSubstr("the replica at most 1 MiB (--audit_local_replica_memory_mb)"));
}

// A BatchNorm job on logical replicas on one worker: one free worker replays all four
// replicas (on 2 or more workers it has the shard audit: below).
TEST(ReplayAudit, ABatchNormJobOnReplicasOnOneWorkerIsReplayedAndALiarCaught) {
  const v1::JobSpec spec = BatchNormOnReplicas(20, 1);
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, Undisturbed(spec));
  {
    InProcessWorkers workers(2);
    SparedRun run = RunWithSpares(workers, spec, "bn");
    ASSERT_OK(run.out.status());
    EXPECT_EQ(run.out->param_checksum, clean.param_checksum);
    EXPECT_EQ(run.out->audits, 4);
    EXPECT_EQ(run.out->audits_failed, 0);
    ASSERT_FALSE(run.notes.empty());
    EXPECT_THAT(run.notes[0], HasSubstr("replay audit of step 5: passed: worker w1"));
    for (const v1::StepEvent& e : run.steps) EXPECT_EQ(e.audit(), "") << e.step();  // no shards
  }
  SparedRun run = RunWithLiar(3, 0, spec, "bn-liar");  // w0 the job's; w1, w2 free
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->param_checksum, clean.param_checksum);
  EXPECT_EQ(run.out->recoveries, 1);
  ASSERT_EQ(run.reasons.size(), 1u);
  EXPECT_THAT(run.reasons[0], HasSubstr("replay audit of step 5 failed: worker w1 replayed"));
}

// job on one worker and replays them: the same bits.
TEST(ReplayAudit, ABatchNormJobOnReplicasWithNoFreeWorkerIsReplayedByTheCoordinatorsReplica) {
  const v1::JobSpec spec = BatchNormOnReplicas(10, 1);
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, Undisturbed(spec));
  InProcessWorkers workers(1);
  std::unique_ptr<CoordinatorReplica> replica = Replica();
  SparedRun run = RunWithSpares(workers, spec, "bn-local", replica.get());
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->param_checksum, clean.param_checksum);
  EXPECT_EQ(run.out->audits, 2);
  EXPECT_EQ(run.out->audits_failed, 0);
  ASSERT_EQ(run.notes.size(), 2u);
  EXPECT_THAT(run.notes[1], HasSubstr("replay audit of step 10: passed: the coordinator's replica "
                                      "replayed steps 6 to 10"));
}

// Through the coordinator: the JobManager lends a free registered worker for the replay and
// takes it back; a liar running a one-worker job is caught, replaced, and the job ends with
// the undisturbed checksum, its events saying so.
TEST(ReplayAudit, TheCoordinatorLendsAFreeWorkerAndCatchesAOneWorkerLiar) {
  const v1::JobSpec spec = OneWorker(20);
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, Undisturbed(spec));
  InProcessWorkers workers(3);
  workers.slot(0).SetGradientFaultForTesting(Double);  // the scheduler's first pick
  const std::string dir = TempDir("manager-replay");
  CoordinatorOptions options;
  options.checkpoint_dir = dir + "/checkpoints";
  options.snapshot_dir = dir + "/snapshots";
  WorkerPool pool(absl::Hours(1));
  JobManager jobs(options, &pool, nullptr, workers.factory());
  std::vector<std::string> ids;  // the pool's, in slot order
  for (const PoolWorker& w : workers.pool_workers()) {
    ids.push_back(pool.Register(w.address, "cpu", w.id, 1));
  }
  ASSERT_OK(jobs.Start());
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs.Submit(spec));
  std::vector<v1::JobEvent> events;
  ASSERT_OK_AND_ASSIGN(v1::Job done, AwaitEnd(jobs, job.id(), absl::Minutes(2), &events));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_EQ(done.param_checksum(), clean.param_checksum);
  EXPECT_EQ(done.recoveries(), 1);
  std::vector<std::string> reasons;
  for (const v1::JobEvent& e : events) {
    if (e.has_state() && !e.state().reason().empty()) reasons.push_back(e.state().reason());
  }
  auto said = [&reasons](const std::string& what) {
    return std::count_if(reasons.begin(), reasons.end(),
                         [&what](const std::string& r) { return absl::StrContains(r, what); });
  };
  EXPECT_EQ(said(absl::StrCat("replay audit of step 5 failed: worker ", ids[1])), 1);
  EXPECT_EQ(said(absl::StrCat("so worker ", ids[0], " is replaced")), 1);
  // Its replacement is ids[1] or ids[2]; the other checks it, unless it is ids[1] (the
  // checker that disagreed, lent to this job no more).
  EXPECT_EQ(said(absl::StrCat("replay audit of step 20: passed: worker ", ids[2])) +
                said("replay audit of step 20: skipped: no free worker"),
            1);
  // Every lent worker went back: none is held by the ended job.
  for (const WorkerView& v : pool.Views()) EXPECT_TRUE(v.free) << v.id;
  std::filesystem::remove_all(dir);
}

// Through the coordinator, with one registered worker (busy with the job): the replay runs
// on the coordinator's own replica (--audit_local_replica, the default); without one
// (--audit_local_replica=false) it is skipped as before.
TEST(ReplayAudit, TheCoordinatorReplaysOnItsOwnReplicaUnlessTurnedOff) {
  const v1::JobSpec spec = OneWorker(5);
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, Undisturbed(spec));
  std::unique_ptr<CoordinatorReplica> replica = Replica();
  for (LocalReplica* local :
       {static_cast<LocalReplica*>(replica.get()), static_cast<LocalReplica*>(nullptr)}) {
    InProcessWorkers workers(1);
    const std::string dir = TempDir("manager-local");
    std::vector<v1::JobEvent> events;
    absl::StatusOr<v1::Job> done;
    {
      InProcessCoordinator c(OptionsIn(dir), &workers);
      c.jobs.SetLocalReplica(local);
      ASSERT_OK(c.jobs.Start());
      ASSERT_OK_AND_ASSIGN(v1::Job job, c.jobs.Submit(spec));
      done = AwaitEnd(c.jobs, job.id(), absl::Minutes(2), &events);
    }
    std::filesystem::remove_all(dir);
    ASSERT_OK(done.status());
    ASSERT_EQ(done->state(), v1::SUCCEEDED) << done->failure_reason();
    EXPECT_EQ(done->param_checksum(), clean.param_checksum);
    std::vector<std::string> said;
    for (const v1::JobEvent& e : events) {
      if (e.has_state() && absl::StrContains(e.state().reason(), "replay audit")) {
        said.push_back(e.state().reason());
      }
    }
    ASSERT_EQ(said.size(), 1u);
    EXPECT_THAT(said[0],
                HasSubstr(local != nullptr ? "replay audit of step 5: passed: the coordinator's "
                                             "replica replayed steps 1 to 5"
                                           : "replay audit of step 5: skipped: no free worker of "
                                             "equal threads"));
  }
}

}  // namespace
}  // namespace lockstep::testing
