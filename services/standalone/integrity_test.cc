// What the coordinator writes, against real replicas in this process (JobSlots, Gloo on
// loopback), with the disk doing what disks do:
//  - a byte flipped in any kind of tensor of the newest snapshot (params, adam's mu and nu,
//    the count, BatchNorm's batch_stats) or in its metadata: the restarted job resumes
//    from the snapshot before, says which file and tensor it skipped, and ends with the
//    undisturbed run's checksum (the issue's finding: 64 bytes flipped in
//    opt_state.mu.Dense_0.kernel were trained from);
//  - a final checkpoint that a full disk (a tiny tmpfs) refuses: the job still succeeds,
//    its final state in the newest snapshot and in memory, and the checkpoint is written
//    once there is room.
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/checkpoint.h"
#include "core/io/safetensors_testing.h"
#include "core/io/tmpfs_testing.h"
#include "core/spec/spec.h"
#include "core/spec/testing.h"
#include "core/testing.h"
#include "services/common/observability/job_log_testing.h"
#include "services/coordinator/jobs/job_runner.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_testing.h"
#include "services/coordinator/storage/snapshot_store.h"
#include "services/standalone/testing.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Records the steps; aborts the job after the snapshot of `abort_at` (0: never). As the
// job's WorkerSupply (a runner snapshots only where a recovery can use them) it has no
// spare workers: a lost worker fails the job.
class AbortingSink final : public JobSink, public WorkerSupply {
 public:
  explicit AbortingSink(int64_t abort_at = 0) : abort_at_(abort_at) {}
  void OnRunning(int64_t) override {}
  void OnStep(const v1::StepEvent& e) override { steps.push_back(e.step()); }
  void OnEval(const v1::EvalResult&) override {}
  void OnSnapshot(int64_t step, uint64_t) override {
    if (step == abort_at_ && runner != nullptr) runner->Abort(absl::CancelledError("stop here"));
  }
  void Recovering(const std::vector<std::string>&, const absl::Status& reason,
                  absl::Duration) override {
    runner->NoWorkers(
        absl::UnavailableError(absl::StrCat("no spare workers in this test: ", reason.message())));
  }
  JobRunner* runner = nullptr;
  std::vector<int64_t> steps;

 private:
  const int64_t abort_at_;
};

// Two workers, BatchNorm (so batch_stats) and adam, 30 steps, a snapshot every 10.
v1::JobSpec Spec() {
  v1::JobSpec spec = ValidSpec(R"(
model: {layers: [flatten, dense: {features: 16}, batch_norm: {momentum: 0.9}, relu,
                 dense: {features: 10}]}
optimizer: {kind: adam, learning_rate: 0.001}
global_batch_size: 32
steps: 30
workers: 2
recovery: {snapshot_every_steps: 10, snapshots_kept: 3}
)");
  return spec;
}

absl::StatusOr<JobOutcome> RunOnce(const v1::JobSpec& spec, const CoordinatorOptions& options,
                                   AbortingSink* sink, bool resume) {
  InProcessWorkers workers(2);
  JobRunner runner("job-000001", spec, workers.pool_workers(), workers.factory(), options, sink,
                   sink, resume);
  sink->runner = &runner;
  JobOutcome out;
  absl::Status st = runner.Run(&out);
  sink->runner = nullptr;
  if (!st.ok()) return st;
  return out;
}

TEST(Integrity, AFlipInTheNewestSnapshotResumesFromThePreviousToTheUndisturbedChecksum) {
  const std::string root = TempDir("snapshots");
  CoordinatorOptions options;
  options.checkpoint_dir = root + "/checkpoints";
  options.snapshot_dir = root + "/snapshots";
  AbortingSink clean_sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, RunOnce(Spec(), options, &clean_sink, false));
  fs::remove_all(root);

  LogCapture warnings("warning");
  struct Flip {
    std::string what;  // the tensor, or "header"
    std::string tensor;
    size_t skip;   // bytes into the tensor (or into the file, for the header)
    size_t bytes;  // flipped
  };
  const std::vector<Flip> damages = {
      {"opt_state.mu.Dense_0.kernel", "opt_state.mu.Dense_0.kernel", 1000, 64},
      {"params.Dense_1.kernel", "params.Dense_1.kernel", 40, 1},
      {"opt_state.nu.BatchNorm_0.scale", "opt_state.nu.BatchNorm_0.scale", 4, 1},
      {"opt_state.count", "opt_state.count", 0, 1},
      {"batch_stats.BatchNorm_0.mean", "batch_stats.BatchNorm_0.mean", 8, 1},
      {"header", "", 0, 1},
  };
  for (const Flip& d : damages) {
    SCOPED_TRACE(d.what);
    fs::remove_all(root);
    AbortingSink first(20);
    EXPECT_THAT(RunOnce(Spec(), options, &first, false),
                StatusIs(absl::StatusCode::kCancelled, HasSubstr("stop here")));
    const std::string newest = options.snapshot_dir + "/job-000001/step-000000000020.safetensors";
    const std::string bytes = ReadAll(newest);
    ASSERT_FALSE(bytes.empty());
    const size_t at = d.tensor.empty() ? bytes.find("\"main_key\":\"") + 14
                                       : TensorOffset(bytes, d.tensor) + d.skip;
    std::ofstream(newest, std::ios::binary | std::ios::trunc) << Flipped(bytes, at, d.bytes, 0x21);
    warnings.Clear();
    AbortingSink resumed;
    ASSERT_OK_AND_ASSIGN(JobOutcome out, RunOnce(Spec(), options, &resumed, true));
    EXPECT_EQ(out.param_checksum, clean.param_checksum);
    ASSERT_FALSE(resumed.steps.empty());
    EXPECT_EQ(resumed.steps.front(), 11);  // from the snapshot of step 10
    bool named = false;
    for (const v1::LogLine& l : warnings.lines()) {
      named = named ||
              (absl::StrContains(l.message(), newest) && absl::StrContains(l.message(), d.what));
    }
    EXPECT_TRUE(named) << "no warning names " << newest << " and " << d.what;
  }
  fs::remove_all(root);
}

TEST(Integrity, AFinalCheckpointAFullDiskRefusesIsKeptAndWrittenOnceThereIsRoom) {
  TinyTmpfs disk(256 * 1024);
  LOCKSTEP_SKIP_WITHOUT_TMPFS(disk);
  const std::string root = TempDir("full");
  CoordinatorOptions options;
  options.checkpoint_dir = disk.dir();
  options.snapshot_dir = root + "/snapshots";
  fs::create_directories(disk.dir() + "/job-000001");
  disk.Fill();
  AbortingSink sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome out, RunOnce(Spec(), options, &sink, false));
  EXPECT_THAT(out.checkpoint_pending, HasSubstr("No space left on device"));
  EXPECT_EQ(out.checkpoint_path, "");
  ASSERT_NE(out.pending, nullptr);
  // The final state is the newest snapshot: a restarted coordinator has it.
  ASSERT_OK_AND_ASSIGN(TrainSetup setup, SetupFromSpec(Spec()));
  SnapshotStore snapshots(options.snapshot_dir + "/job-000001", 3);
  ASSERT_OK_AND_ASSIGN(std::optional<Snapshot> latest,
                       snapshots.Latest(setup.model, setup.optimizer));
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->state.step, 30);
  EXPECT_EQ(ParamChecksum(latest->state.params, latest->state.batch_stats), out.param_checksum);

  EXPECT_THAT(out.pending->Write(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("No space")));
  disk.Free();
  ASSERT_OK(out.pending->Write());
  ASSERT_OK_AND_ASSIGN(TrainState state,
                       ReadCheckpoint(out.pending->path(), setup.model, setup.optimizer));
  EXPECT_EQ(state.step, 30);
  EXPECT_EQ(ParamChecksum(state.params, state.batch_stats), out.param_checksum);
  EXPECT_FALSE(fs::exists(options.snapshot_dir + "/job-000001"));  // the checkpoint holds it
  fs::remove_all(root);
}

// The reasons of the state events among `events`.
std::vector<std::string> Reasons(const std::vector<v1::JobEvent>& events) {
  std::vector<std::string> reasons;
  for (const v1::JobEvent& e : events) {
    if (e.has_state()) reasons.push_back(e.state().reason());
  }
  return reasons;
}

// The issue's finding: after all its steps a job whose checkpoint hit ENOSPC was FAILED.
// Now it is SUCCEEDED with the checkpoint pending (in its record and its state event),
// `lockstep checkpoint` meanwhile gets the final snapshot, a restarted coordinator keeps
// it pending, and GetCheckpoint writes it once there is room.
TEST(Integrity, AJobWhoseCheckpointHitsAFullDiskSucceedsAndWritesItOnceThereIsRoom) {
  TinyTmpfs disk(256 * 1024);
  LOCKSTEP_SKIP_WITHOUT_TMPFS(disk);
  const std::string root = TempDir("manager");
  InProcessWorkers workers(2);
  CoordinatorOptions options = OptionsIn(root);
  options.checkpoint_dir = disk.dir();
  auto c = std::make_unique<InProcessCoordinator>(options, &workers);
  JobManager* jobs = &c->jobs;
  ASSERT_OK(jobs->Start());
  disk.Fill();
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs->Submit(Spec()));
  std::vector<v1::JobEvent> events;
  ASSERT_OK_AND_ASSIGN(v1::Job done, AwaitEnd(*jobs, job.id(), absl::Minutes(2), &events));
  const std::vector<std::string> reasons = Reasons(events);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_THAT(done.checkpoint_pending(), HasSubstr("No space left on device"));
  EXPECT_EQ(done.checkpoint_path(), "");
  ASSERT_FALSE(reasons.empty());
  EXPECT_THAT(reasons.back(), HasSubstr("final checkpoint pending: "));
  // Meanwhile the job's state is its final snapshot.
  ASSERT_OK_AND_ASSIGN(JobManager::StateFile file, jobs->CheckpointFile(job.id(), std::nullopt));
  EXPECT_EQ(file.step, 30);
  EXPECT_THAT(file.path, HasSubstr(options.snapshot_dir));

  // A restarted coordinator, the disk still full: still pending, from the snapshot.
  c = std::make_unique<InProcessCoordinator>(options, &workers);
  jobs = &c->jobs;
  ASSERT_OK(jobs->Start());
  ASSERT_OK_AND_ASSIGN(v1::Job reloaded, jobs->Get(job.id()));
  EXPECT_EQ(reloaded.state(), v1::SUCCEEDED);
  EXPECT_THAT(reloaded.checkpoint_pending(), HasSubstr("No space left on device"));
  disk.Free();
  ASSERT_OK_AND_ASSIGN(file, jobs->CheckpointFile(job.id(), std::nullopt));  // writes it
  EXPECT_THAT(file.path, HasSubstr(disk.dir()));
  ASSERT_OK_AND_ASSIGN(v1::Job written, jobs->Get(job.id()));
  EXPECT_EQ(written.checkpoint_pending(), "");
  EXPECT_EQ(written.checkpoint_path(), file.path);
  ASSERT_OK_AND_ASSIGN(TrainSetup setup, SetupFromSpec(Spec()));
  ASSERT_OK_AND_ASSIGN(TrainState state, ReadCheckpoint(file.path, setup.model, setup.optimizer));
  EXPECT_EQ(state.step, 30);
  EXPECT_EQ(ParamChecksum(state.params, state.batch_stats), done.param_checksum());
  c.reset();
  fs::remove_all(root);
}

}  // namespace
}  // namespace lockstep::testing
