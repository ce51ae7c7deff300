// The cluster's scheduling and failure behaviour, across real processes: concurrent jobs
// on disjoint workers with a third queued, a job too big for the pool passed over, a
// worker killed mid-job, invalid specs, a
// missing dataset, cancellation, idempotent submits and misbehaving clients.
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/testing.h"
#include "services/common/rpc/net.h"
#include "services/common/rpc/status.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::unique_ptr<LocalCluster> StartCluster(int workers, std::vector<std::string> flags = {}) {
  auto c = LocalCluster::Start(workers, std::move(flags));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

int FreeWorkers(LocalCluster& c) {
  auto w = c.Workers();
  int free = 0;
  for (const auto& x : w->workers()) free += x.job_id().empty() ? 1 : 0;
  return free;
}

TEST(Cluster, TwoJobsRunConcurrentlyAndAThirdWaitsThenRuns) {
  auto c = StartCluster(4);
  ASSERT_NE(c, nullptr);
  auto a = c->Submit(MlpSpec(2, 400));
  auto b = c->Submit(MlpSpec(2, 400));
  auto third = c->Submit(MlpSpec(2, 50));
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(third);
  EXPECT_EQ(c->Get(a->id())->state(), v1::RUNNING);
  EXPECT_EQ(c->Get(b->id())->state(), v1::RUNNING);
  EXPECT_EQ(c->Get(third->id())->state(), v1::QUEUED);
  EXPECT_EQ(c->Get(third->id())->waiting_for(), "2 free cpu workers");
  ASSERT_OK(c->WaitForStep(a->id(), 1, absl::Minutes(2)));
  ASSERT_OK(c->WaitForStep(b->id(), 1, absl::Minutes(2)));
  auto done = c->WaitFor(third->id(), absl::Minutes(5));
  ASSERT_OK(done);
  EXPECT_EQ(done->state(), v1::SUCCEEDED) << done->failure_reason();
  // The third may well end before the slower of the first two.
  auto ja = c->WaitFor(a->id(), absl::Minutes(2)), jb = c->WaitFor(b->id(), absl::Minutes(2));
  ASSERT_OK(ja);
  ASSERT_OK(jb);
  EXPECT_EQ(ja->state(), v1::SUCCEEDED);
  EXPECT_EQ(jb->state(), v1::SUCCEEDED);
  // The first two ran at the same time (each started before the other finished), from
  // the coordinator's own stamps: a poll after their first steps would race a fast
  // machine, where 400 steps take well under a second (the third had started by then).
  EXPECT_LT(ja->started_unix_ms(), jb->finished_unix_ms());
  EXPECT_LT(jb->started_unix_ms(), ja->finished_unix_ms());
  // The third waited until one of them was done.
  EXPECT_GE(done->started_unix_ms(), std::min(ja->finished_unix_ms(), jb->finished_unix_ms()));
}

TEST(Cluster, AJobTooBigForThePoolWaitsWithoutBlockingOthersAndRunsOnceWorkersJoin) {
  auto c = StartCluster(2);
  ASSERT_NE(c, nullptr);
  auto big = c->Submit(MlpSpec(3, 30, 0.0, 96));  // more workers than are registered
  auto small = c->Submit(MlpSpec(2, 30));         // behind it in the queue
  ASSERT_OK(big);
  ASSERT_OK(small);
  auto small_done = c->WaitFor(small->id(), absl::Minutes(2));
  ASSERT_OK(small_done);
  EXPECT_EQ(small_done->state(), v1::SUCCEEDED) << small_done->failure_reason();
  EXPECT_EQ(c->Get(big->id())->state(), v1::QUEUED);
  EXPECT_EQ(c->Get(big->id())->waiting_for(), "3 cpu workers (2 registered)");
  ASSERT_OK(c->AddWorker());  // a third worker registers: the big job fits now
  auto big_done = c->WaitFor(big->id(), absl::Minutes(2));
  ASSERT_OK(big_done);
  EXPECT_EQ(big_done->state(), v1::SUCCEEDED) << big_done->failure_reason();
  EXPECT_EQ(big_done->workers_size(), 3);
}

TEST(Cluster, KilledWorkerFailsItsJobWithinTenSecondsAndOthersGoOn) {
  auto c = StartCluster(4);
  ASSERT_NE(c, nullptr);
  v1::JobSpec victim_spec = MlpSpec(2, 100000);         // long: killed mid-run
  victim_spec.mutable_recovery()->set_max_restarts(0);  // fail fast (recovery: chaos_test)
  auto victim = c->Submit(victim_spec);
  auto other = c->Submit(MlpSpec(2, 600));
  ASSERT_OK(victim);
  ASSERT_OK(other);
  // Wait until the victim job is stepping.
  ASSERT_OK(c->WaitForStep(victim->id(), 5, absl::Minutes(2)));
  const std::string killed_id = c->Get(victim->id())->workers(1);
  // Workers register in start order; the victim job has workers 0 and 1.
  c->KillWorker(1);
  const absl::Time killed_at = absl::Now();
  auto failed = c->WaitFor(victim->id(), absl::Seconds(10));
  ASSERT_OK(failed);
  EXPECT_LT(absl::Now() - killed_at, absl::Seconds(10));
  EXPECT_EQ(failed->state(), v1::FAILED);
  EXPECT_THAT(failed->failure_reason(), HasSubstr(killed_id));
  // The coordinator keeps serving; the other job finishes; the survivor is free again.
  auto ok = c->WaitFor(other->id(), absl::Minutes(3));
  ASSERT_OK(ok);
  EXPECT_EQ(ok->state(), v1::SUCCEEDED) << ok->failure_reason();
  // The dead one is gone (dropped as unreachable when its job failed) and the survivor is
  // free again (released when its job ended): both before the jobs' states changed.
  EXPECT_EQ(c->Workers()->workers_size(), 3);
  EXPECT_EQ(FreeWorkers(*c), 3);
  // The survivor takes new work.
  auto next = c->Submit(MlpSpec(2, 20));
  ASSERT_OK(next);
  auto next_done = c->WaitFor(next->id(), absl::Minutes(2));
  EXPECT_EQ(next_done->state(), v1::SUCCEEDED) << next_done->failure_reason();
}

struct BadSpec {
  std::string name;
  std::function<void(v1::JobSpec&)> edit;
  std::string field;
};

TEST(Cluster, InvalidSpecsAreRejectedAtSubmitNamingTheField) {
  auto c = StartCluster(1, {"--max_params=200000", "--max_workers_per_job=8"});
  ASSERT_NE(c, nullptr);
  const std::vector<BadSpec> cases = {
      {"indivisible",
       [](v1::JobSpec& s) {
         s.set_global_batch_size(63);
         s.set_workers(2);
       },
       "global_batch_size"},
      {"model", [](v1::JobSpec& s) { s.mutable_model()->set_kind("resnet"); }, "model.kind"},
      {"optimizer", [](v1::JobSpec& s) { s.mutable_optimizer()->set_kind("lamb"); },
       "optimizer.kind"},
      {"lr", [](v1::JobSpec& s) { s.mutable_optimizer()->set_learning_rate(0); },
       "optimizer.learning_rate"},
      {"params", [](v1::JobSpec& s) { s.mutable_model()->set_hidden(0, 4096); }, "model"},
      {"workers", [](v1::JobSpec& s) { s.set_workers(16); }, "workers"},
      {"checkpoint", [](v1::JobSpec& s) { s.set_checkpoint_path("../../etc/x"); },
       "checkpoint_path"},
      {"dataset outside the data roots",
       [](v1::JobSpec& s) { s.mutable_dataset()->set_path("/etc"); }, "dataset.path"},
      {"dataset climbing out of a root",
       [](v1::JobSpec& s) { s.mutable_dataset()->set_path("/usr/share/datasets/../../../etc"); },
       "dataset.path"},
  };
  for (const auto& bad : cases) {
    v1::JobSpec spec = MlpSpec(1, 10);
    bad.edit(spec);
    EXPECT_THAT(c->Submit(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(bad.field)))
        << bad.name;
  }
}

TEST(Cluster, MissingDatasetFailsTheJobNamingThePath) {
  auto c = StartCluster(1);
  ASSERT_NE(c, nullptr);
  v1::JobSpec spec = MlpSpec(1, 10);
  spec.mutable_dataset()->set_name("custom");
  spec.mutable_dataset()->set_path("/usr/share/datasets/no-such-dataset");  // in a data root
  auto job = c->Submit(spec);
  ASSERT_OK(job);
  auto done = c->WaitFor(job->id(), absl::Seconds(30));
  ASSERT_OK(done);
  EXPECT_EQ(done->state(), v1::FAILED);
  EXPECT_EQ(done->failure_code(), "FAILED_PRECONDITION");
  EXPECT_THAT(done->failure_reason(), HasSubstr("/usr/share/datasets/no-such-dataset"));
  EXPECT_EQ(FreeWorkers(*c), 1);
}

TEST(Cluster, AWorkerReadsNoDatasetOutsideItsDataRootsAndSaysSoAlikeWhetherItExists) {
  // A coordinator that lets every path through (--data_root=/): the worker, with the
  // default roots, refuses them at Prepare, before reading anything.
  auto c = StartCluster(1, {"--data_root=/"});
  ASSERT_NE(c, nullptr);
  std::string first;
  for (const std::string path :
       {"/etc", "/etc/no-such-folder", "/proc/self", "/usr/share/datasets/../../../etc"}) {
    v1::JobSpec spec = MlpSpec(1, 10);
    spec.mutable_dataset()->set_name("mnist");
    spec.mutable_dataset()->set_path(path);
    ASSERT_OK_AND_ASSIGN(v1::Job job, c->Submit(spec));
    ASSERT_OK_AND_ASSIGN(v1::Job done, c->WaitFor(job.id(), absl::Seconds(30)));
    EXPECT_EQ(done.state(), v1::FAILED);
    EXPECT_EQ(done.failure_code(), "INVALID_ARGUMENT");
    EXPECT_THAT(done.failure_reason(),
                HasSubstr("dataset.path: \"" + path + "\" is outside the data roots"));
    std::string text = done.failure_reason();
    text.replace(text.find(path), path.size(), "PATH");
    if (first.empty()) first = text;
    EXPECT_EQ(text, first);
  }
  EXPECT_EQ(FreeWorkers(*c), 1);
}

TEST(Cluster, CancelMidRunReleasesTheWorkers) {
  auto c = StartCluster(2);
  ASSERT_NE(c, nullptr);
  auto job = c->Submit(MlpSpec(2, 100000));
  ASSERT_OK(job);
  ASSERT_OK(c->WaitForStep(job->id(), 3, absl::Minutes(2)));
  ASSERT_OK(c->Cancel(job->id()));
  auto done = c->WaitFor(job->id(), absl::Seconds(10));
  ASSERT_OK(done);
  EXPECT_EQ(done->state(), v1::CANCELLED);
  EXPECT_EQ(FreeWorkers(*c), 2);
  auto next = c->Submit(MlpSpec(2, 10));
  ASSERT_OK(next);
  EXPECT_EQ(c->WaitFor(next->id(), absl::Minutes(1))->state(), v1::SUCCEEDED);
}

TEST(Cluster, SameRequestIdCreatesOneJob) {
  auto c = StartCluster(1);
  ASSERT_NE(c, nullptr);
  v1::JobSpec spec = MlpSpec(1, 5);
  spec.set_request_id("req-42");
  auto a = c->Submit(spec);
  auto b = c->Submit(spec);
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(a->id(), b->id());
  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(c->jobs().ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 1);
}

TEST(Cluster, MisbehavingClientsCannotTakeTheCoordinatorDown) {
  auto c = StartCluster(1, {"--max_watchers=4", "--history_bytes=8192"});
  ASSERT_NE(c, nullptr);
  // An oversized message is refused by the transport.
  v1::JobSpec huge = MlpSpec(1, 5);
  huge.set_name(std::string(kMaxMessageBytes + 1024, 'x'));
  EXPECT_THAT(c->Submit(huge), StatusIs(absl::StatusCode::kResourceExhausted, ::testing::_));
  // A flood of watchers: the first ones stream, the rest are refused.
  auto job = c->Submit(MlpSpec(1, 300));
  ASSERT_OK(job);
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::JobEvent>>> readers;
  int refused = 0;
  for (int i = 0; i < 12; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    v1::WatchJobRequest req;
    req.set_id(job->id());
    readers.push_back(c->jobs().WatchJob(ctxs.back().get(), req));
    v1::JobEvent e;
    if (!readers.back()->Read(&e)) {
      grpc::Status st = readers.back()->Finish();
      EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
      readers.back().reset();
      ++refused;
    }
  }
  EXPECT_EQ(refused, 8);
  for (auto& ctx : ctxs) ctx->TryCancel();
  for (auto& r : readers) {
    if (r) r->Finish();
  }
  // Still serving, and the job ran to the end with a bounded history: its states and its
  // steps (issue 26: a finished job keeps them, every one up to --history_steps, 2,000).
  auto done = c->WaitFor(job->id(), absl::Minutes(2));
  ASSERT_OK(done);
  EXPECT_EQ(done->state(), v1::SUCCEEDED);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::JobEvent> events, c->Events(job->id()));
  EXPECT_LE(events.size(), 300u + 10u);
}

TEST(Cluster, RestartedCoordinatorKeepsJobRecordsAndResumesItsRunningJob) {
  auto c = StartCluster(1);
  ASSERT_NE(c, nullptr);
  auto done = c->Submit(MlpSpec(1, 20));
  ASSERT_OK(done);
  auto finished = c->WaitFor(done->id(), absl::Minutes(1));
  ASSERT_OK(finished);
  ASSERT_EQ(finished->state(), v1::SUCCEEDED);
  auto running = c->Submit(MlpSpec(1, 1000000));
  ASSERT_OK(running);
  ASSERT_OK(c->WaitForStep(running->id(), 3, absl::Minutes(2)));
  // The running job's TensorBoard file versions ("brain.Event:2" records), written on the
  // coordinator's writer thread: waits up to 10 s for `n`.
  auto TensorBoardVersionsReach = [&](int n) {
    auto versions = [&] {
      int found = 0;
      std::error_code ec;
      for (const auto& f : std::filesystem::directory_iterator(
               absl::StrCat(c->dir(), "/state/tensorboard/", running->id()), ec)) {
        std::ifstream in(f.path(), std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), {});
        for (size_t at = 0; (at = bytes.find("brain.Event:2", at)) != std::string::npos; ++at) {
          ++found;
        }
      }
      return found;
    };
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (versions() < n && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
    return versions() == n;
  };
  // The first run's file is on disk before its coordinator is killed.
  ASSERT_TRUE(TensorBoardVersionsReach(1));
  ASSERT_OK(c->RestartCoordinator());
  auto kept = c->Get(done->id());
  ASSERT_OK(kept);
  EXPECT_EQ(kept->state(), v1::SUCCEEDED);
  EXPECT_EQ(kept->checkpoint_path(), finished->checkpoint_path());
  EXPECT_EQ(kept->last_eval().test_accuracy(), finished->last_eval().test_accuracy());
  // The running job is not lost: it runs again (its worker registers again), counted as
  // a recovery.
  auto resumed = c->WaitFor(running->id(), absl::Minutes(1), v1::RUNNING);
  ASSERT_OK(resumed);
  EXPECT_EQ(resumed->state(), v1::RUNNING) << resumed->failure_reason();
  EXPECT_EQ(resumed->recoveries(), 1);
  ASSERT_OK(c->WaitForStep(running->id(), 1, absl::Minutes(2)));  // this coordinator's step
  ASSERT_OK(c->Cancel(running->id()));
  ASSERT_EQ(c->WaitFor(running->id(), absl::Minutes(1))->state(), v1::CANCELLED);
  {  // Its TensorBoard events: each coordinator's run began its own file (or, within the
     // same second, appended to the first), none written over.
    EXPECT_TRUE(TensorBoardVersionsReach(2));
  }
  // The worker takes new work; job ids are not reused.
  auto next = c->Submit(MlpSpec(1, 10));
  ASSERT_OK(next);
  EXPECT_NE(next->id(), done->id());
  EXPECT_NE(next->id(), running->id());
  auto next_done = c->WaitFor(next->id(), absl::Minutes(1));
  ASSERT_OK(next_done);
  EXPECT_EQ(next_done->state(), v1::SUCCEEDED) << next_done->failure_reason();
}

// `lockstep checkpoint` with this cluster's coordinator; its exit code.
int CheckpointCli(LocalCluster& c, const std::string& args) {
  const std::string cli = std::string(LOCKSTEP_BINARY_DIR) + "/clients/lockstep";
  return WEXITSTATUS(
      std::system(absl::StrCat(cli, " checkpoint --coordinator ", c.address(), " --credentials ",
                               c.processes().credentials_dir(), " ", args, " >&2")
                      .c_str()));
}

TEST(Cluster, AJobResumesFromAnotherJobsStateBitForBitAndItsStateDownloads) {
  auto c = StartCluster(2);
  ASSERT_NE(c, nullptr);
  ASSERT_OK_AND_ASSIGN(v1::Job straight, c->Submit(MlpSpec(2, 40, 0.2)));
  ASSERT_OK_AND_ASSIGN(v1::Job first, c->Submit(MlpSpec(2, 15, 0.2)));
  ASSERT_EQ(c->WaitFor(first.id(), absl::Minutes(2))->state(), v1::SUCCEEDED);
  v1::JobSpec rest = MlpSpec(2, 40, 0.2);
  rest.set_resume_from(first.id());  // its final checkpoint, on the coordinator
  ASSERT_OK_AND_ASSIGN(v1::Job resumed, c->Submit(rest));
  ASSERT_OK_AND_ASSIGN(v1::Job straight_done, c->WaitFor(straight.id(), absl::Minutes(2)));
  ASSERT_OK_AND_ASSIGN(v1::Job resumed_done, c->WaitFor(resumed.id(), absl::Minutes(2)));
  ASSERT_EQ(resumed_done.state(), v1::SUCCEEDED) << resumed_done.failure_reason();
  EXPECT_EQ(resumed_done.param_checksum(), straight_done.param_checksum());
  ASSERT_OK_AND_ASSIGN(std::vector<v1::JobEvent> events, c->Events(resumed.id()));
  for (const v1::JobEvent& e : events) {
    if (e.has_step()) EXPECT_GT(e.step().step(), 15);  // steps 1..15 were the first job's
  }

  // The CLI downloads it whole, as the coordinator keeps it.
  const std::string out = c->dir() + "/downloaded.safetensors";
  ASSERT_EQ(CheckpointCli(*c, absl::StrCat(resumed.id(), " -o ", out)), 0);
  EXPECT_EQ(ReadAll(out), ReadAll(resumed_done.checkpoint_path()));
  EXPECT_FALSE(std::filesystem::exists(out + ".part"));
  // A step it does not keep is NOT_FOUND (exit 1), and no file is left.
  EXPECT_EQ(CheckpointCli(*c, absl::StrCat(resumed.id(), " --step 7 -o ", out, "-7")), 1);
  EXPECT_FALSE(std::filesystem::exists(out + "-7"));

  // A cancelled job's newest snapshot: the rest of its run, bit for bit.
  v1::JobSpec endless = MlpSpec(2, 100000000, 0.2);
  endless.mutable_recovery()->set_snapshot_every_steps(50);
  ASSERT_OK_AND_ASSIGN(v1::Job cancelled, c->Submit(endless));
  ASSERT_OK(c->WaitForStep(cancelled.id(), 120, absl::Minutes(2)));
  ASSERT_OK(c->Cancel(cancelled.id()));
  ASSERT_OK_AND_ASSIGN(v1::Job straight_long, c->Submit(MlpSpec(2, 1500, 0.2)));
  v1::JobSpec rest_long = MlpSpec(2, 1500, 0.2);
  rest_long.set_resume_from(cancelled.id());
  ASSERT_OK_AND_ASSIGN(v1::Job continued, c->Submit(rest_long));
  ASSERT_OK_AND_ASSIGN(v1::Job straight_long_done,
                       c->WaitFor(straight_long.id(), absl::Minutes(2)));
  ASSERT_OK_AND_ASSIGN(v1::Job continued_done, c->WaitFor(continued.id(), absl::Minutes(2)));
  ASSERT_EQ(continued_done.state(), v1::SUCCEEDED) << continued_done.failure_reason();
  EXPECT_EQ(continued_done.param_checksum(), straight_long_done.param_checksum());
  ASSERT_OK_AND_ASSIGN(events, c->Events(continued.id()));
  for (const v1::JobEvent& e : events) {
    if (e.has_step()) EXPECT_GT(e.step().step(), 100);  // from a snapshot at 100 or later
  }
}

TEST(Cluster, WatchResumesFromAStepAndAFinishedJobKeepsItsStatesAndEvaluations) {
  auto c = StartCluster(1);
  ASSERT_NE(c, nullptr);
  v1::JobSpec spec = MlpSpec(1, 1000000);
  spec.mutable_eval()->set_every_steps(20);
  auto job = c->Submit(spec);
  ASSERT_OK(job);
  ASSERT_OK(c->WaitForStep(job->id(), 35, absl::Minutes(1)));
  {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_id(job->id());
    req.set_from_step(30);
    auto reader = c->jobs().WatchJob(&ctx, req);
    v1::JobEvent e;
    std::vector<int64_t> steps;
    while (reader->Read(&e)) {
      if (!e.has_step()) continue;
      steps.push_back(e.step().step());
      if (e.step().step() >= 40) ctx.TryCancel();
    }
    reader->Finish();
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps.front(), 30);
    for (size_t i = 1; i < steps.size(); ++i) EXPECT_EQ(steps[i], steps[i - 1] + 1);
  }
  ASSERT_OK(c->Cancel(job->id()));
  auto done = c->WaitFor(job->id(), absl::Minutes(1));
  ASSERT_OK(done);
  ASSERT_EQ(done->state(), v1::CANCELLED);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::JobEvent> events, c->Events(job->id()));
  int evals = 0, states = 0, steps = 0;
  for (const v1::JobEvent& e : events) {
    evals += e.has_eval();
    states += e.has_state();
    steps += e.has_step();
  }
  EXPECT_EQ(steps, done->step());  // issue 26: every step kept (under --history_steps)
  EXPECT_GE(evals, 1);
  EXPECT_EQ(states, 3);  // QUEUED, RUNNING, CANCELLED
}

}  // namespace
}  // namespace lockstep::testing
