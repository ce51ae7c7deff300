// The coordinator's job loop (JobRunner) against real replicas in this process (JobSlots on
// the CPU, Gloo on loopback between them): data-parallel equivalence without processes,
// resuming and fine-tuning from checkpoints bitwise, stray connections at the collective's
// bootstrap, and jobs that fail before or while training. npz_dataset_test.cc,
// cancel_test.cc, drain_test.cc and integrity_test.cc test the same loop for other ideas.
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/checkpoint.h"
#include "core/io/safetensors.h"
#include "core/spec/spec.h"
#include "core/spec/testing.h"
#include "core/testing.h"
#include "services/coordinator/jobs/job_runner.h"
#include "services/standalone/testing.h"
#include "workers/gloo/stray_connection_store.h"

namespace lockstep::testing {
namespace {

TEST(InProcessJobLoop, TwoWorkersEndWithOneWorkersParams) {
  const std::string dir = TempDir("inproc");
  CoordinatorOptions options;
  options.checkpoint_dir = dir;
  std::vector<std::vector<float>> params;
  for (int n : {1, 2}) {
    InProcessWorkers workers(n);
    StepRecorder sink;
    JobRunner runner(absl::StrCat("job-", n), SmallMlpSpec(n, 20), workers.pool_workers(),
                     workers.factory(), options, &sink);
    JobOutcome out;
    ASSERT_OK(runner.Run(&out));
    ASSERT_EQ(sink.steps.size(), 20u);
    for (const v1::StepEvent& s : sink.steps) {
      ASSERT_EQ(s.local_losses_size(), n);
      float sum = 0;
      for (float l : s.local_losses()) sum += l;
      EXPECT_EQ(s.loss(), sum / static_cast<float>(n));
    }
    ASSERT_OK_AND_ASSIGN(TrainSetup setup, SetupFromSpec(SmallMlpSpec(n, 20)));
    ASSERT_OK_AND_ASSIGN(TrainState state,
                         ReadCheckpoint(out.checkpoint_path, setup.model, setup.optimizer));
    EXPECT_EQ(state.step, 20);
    EXPECT_EQ(ParamChecksum(state.params), out.param_checksum);
    params.push_back(state.params);
  }
  EXPECT_LE(RelativeL2(params[1], params[0]), 1e-5);
  std::filesystem::remove_all(dir);
}

// A 2-worker MLP job with dropout (so that the per-worker keys matter) of `steps` steps.
v1::JobSpec DropoutSpec(int steps, const std::string& checkpoint, const std::string& from = "") {
  v1::JobSpec spec = SmallMlpSpec(2, steps);
  spec.mutable_model()->set_dropout_rate(0.2);
  spec.set_checkpoint_path(checkpoint);
  spec.set_resume_from(from);
  return spec;
}

TEST(InProcessJobLoop, ResumeFromACheckpointEndsBitwiseWhereAnUninterruptedRunDoes) {
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("resume");
  StepRecorder straight_sink, first_sink, resumed_sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome straight,
                       RunInProcess(DropoutSpec(30, "straight"), options, &straight_sink));
  ASSERT_OK(RunInProcess(DropoutSpec(12, "first"), options, &first_sink).status());
  ASSERT_OK_AND_ASSIGN(JobOutcome resumed, RunInProcess(DropoutSpec(30, "resumed", "first/first"),
                                                        options, &resumed_sink));
  ASSERT_EQ(resumed_sink.steps.size(), 18u);
  EXPECT_EQ(resumed_sink.steps.front().step(), 13);
  EXPECT_EQ(resumed_sink.steps.back().loss(), straight_sink.steps.back().loss());
  EXPECT_EQ(resumed.param_checksum, straight.param_checksum);
  ASSERT_OK_AND_ASSIGN(TrainSetup setup, SetupFromSpec(DropoutSpec(30, "")));
  ASSERT_OK_AND_ASSIGN(TrainState a,
                       ReadCheckpoint(straight.checkpoint_path, setup.model, setup.optimizer));
  ASSERT_OK_AND_ASSIGN(TrainState b,
                       ReadCheckpoint(resumed.checkpoint_path, setup.model, setup.optimizer));
  EXPECT_EQ(b.step, 30);
  EXPECT_TRUE(a.params == b.params);
  EXPECT_TRUE(a.slots == b.slots);  // the optimizer state too

  // Other settings continue no Lockstep state: the error says what differs and what to do.
  v1::JobSpec other_lr = DropoutSpec(30, "other", "first/first");
  other_lr.mutable_optimizer()->set_learning_rate(0.01);
  StepRecorder unused;
  EXPECT_THAT(RunInProcess(other_lr, options, &unused),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(::testing::HasSubstr("resume_from"),
                                        ::testing::HasSubstr("optimizer"),
                                        ::testing::HasSubstr("params-only"))));
  std::filesystem::remove_all(options.checkpoint_dir);
}

TEST(InProcessJobLoop, StrayConnectionsToTheCollectiveListenersCostTheJobNothing) {
  // Issue 22, item 4: while the workers bootstrap their collective, every listener they
  // publish gets random bytes, a half-open connection, a plausible peer address, a wrong
  // pairing token and a connection closed at once, all queued ahead of the real peer.
  // The job needs no recovery (it has no spare workers: any would fail it) and ends
  // bitwise where the undisturbed one does.
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("stray");
  StepRecorder calm_sink, attacked_sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome calm, RunInProcess(DropoutSpec(10, "calm"), options, &calm_sink));
  MemoryStore memory;
  StrayConnectionStore stray(&memory);
  InProcessWorkers workers(2, &stray);
  JobRunner runner("attacked", DropoutSpec(10, "attacked"), workers.pool_workers(),
                   workers.factory(), options, &attacked_sink);
  JobOutcome attacked;
  ASSERT_OK(runner.Run(&attacked));
  EXPECT_GE(stray.connected(), 5) << "the attack reached no listener";
  EXPECT_EQ(attacked.recoveries, 0);
  EXPECT_EQ(attacked.param_checksum, calm.param_checksum);
  ASSERT_EQ(attacked_sink.steps.size(), calm_sink.steps.size());
  EXPECT_EQ(attacked_sink.steps.back().loss(), calm_sink.steps.back().loss());
  std::filesystem::remove_all(options.checkpoint_dir);
}

TEST(InProcessJobLoop, JobsNamingTheSameCheckpointWriteInTheirOwnFoldersAndResumeFromThem) {
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("own-folders");
  StepRecorder sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome one, RunInProcess(DropoutSpec(6, "model.safetensors"), options,
                                                    &sink, "job-000001"));
  ASSERT_OK_AND_ASSIGN(JobOutcome two, RunInProcess(DropoutSpec(8, "model.safetensors"), options,
                                                    &sink, "job-000002"));
  EXPECT_EQ(one.checkpoint_path, options.checkpoint_dir + "/job-000001/model.safetensors");
  EXPECT_EQ(two.checkpoint_path, options.checkpoint_dir + "/job-000002/model.safetensors");
  ASSERT_OK_AND_ASSIGN(TrainSetup setup, SetupFromSpec(DropoutSpec(6, "")));
  ASSERT_OK_AND_ASSIGN(TrainState first,
                       ReadCheckpoint(one.checkpoint_path, setup.model, setup.optimizer));
  EXPECT_EQ(first.step, 6);  // not overwritten by the second job
  // Another job's file by JOB/NAME, or by its id; a name climbing out is refused.
  StepRecorder resumed;
  ASSERT_OK(RunInProcess(DropoutSpec(8, "", "job-000001/model.safetensors"), options, &resumed,
                         "job-000003")
                .status());
  EXPECT_EQ(resumed.steps.front().step(), 7);
  StepRecorder by_id;
  ASSERT_OK(RunInProcess(DropoutSpec(8, "", "job-000001"), options, &by_id, "job-000004").status());
  EXPECT_EQ(by_id.steps.front().step(), 7);
  StepRecorder unused;
  EXPECT_THAT(
      RunInProcess(DropoutSpec(8, "../x"), options, &unused, "job-000005"),
      StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("checkpoint_path")));
  std::filesystem::remove_all(options.checkpoint_dir);
}

TEST(InProcessJobLoop, AParamsOnlyFileFineTunesFromStepZero) {
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("finetune");
  StepRecorder trained_sink, fresh_sink, tuned_sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome trained,
                       RunInProcess(DropoutSpec(60, "trained"), options, &trained_sink));
  // Params only, as Python writes them: flatten_dict({"params": params}, sep=".").
  ASSERT_OK_AND_ASSIGN(SafeTensors full, SafeTensors::Read(trained.checkpoint_path));
  SafeTensors params_only;
  for (const auto& [name, t] : full.tensors()) {
    if (!absl::StartsWith(name, "params.")) continue;
    ASSERT_OK_AND_ASSIGN(std::vector<float> v, full.F32(name));
    params_only.AddF32(name, t.shape, v);
  }
  ASSERT_OK(params_only.Write(options.checkpoint_dir + "/params.safetensors"));

  v1::JobSpec tune = DropoutSpec(5, "tuned", "params.safetensors");
  tune.mutable_optimizer()->set_learning_rate(1e-4);  // other settings are fine here
  ASSERT_OK(RunInProcess(DropoutSpec(5, "fresh"), options, &fresh_sink).status());
  ASSERT_OK(RunInProcess(tune, options, &tuned_sink).status());
  ASSERT_EQ(tuned_sink.steps.size(), 5u);
  EXPECT_EQ(tuned_sink.steps.front().step(), 1);
  // Its first step starts from trained params, not from the seed's initialization.
  EXPECT_LT(tuned_sink.steps.front().loss(), 0.8 * fresh_sink.steps.front().loss());
  std::filesystem::remove_all(options.checkpoint_dir);
}

TEST(InProcessJobLoop, ADivergingJobFailsNamingTheStepAndSavesNothing) {
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("diverge");
  v1::JobSpec spec = DropoutSpec(20, "diverged");
  spec.mutable_optimizer()->set_learning_rate(1e30);
  StepRecorder sink;
  EXPECT_THAT(
      RunInProcess(spec, options, &sink),
      StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::HasSubstr("diverged at step")));
  EXPECT_FALSE(std::filesystem::exists(options.checkpoint_dir + "/diverged/diverged"));
  std::filesystem::remove_all(options.checkpoint_dir);
}

TEST(InProcessJobLoop, ACheckpointPathThatCannotTakeTheCheckpointFailsBeforeTraining) {
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("unwritable");
  std::filesystem::create_directories(options.checkpoint_dir + "/job-1");
  std::ofstream(options.checkpoint_dir + "/job-1/taken") << "a file already there";
  StepRecorder sink;
  EXPECT_THAT(RunInProcess(DropoutSpec(5, "taken"), options, &sink, "job-1"),
              StatusIs(absl::StatusCode::kAlreadyExists, ::testing::HasSubstr("taken")));
  // A folder that is a file (no permission bits stop root, this does).
  EXPECT_THAT(
      RunInProcess(DropoutSpec(5, "taken/x.safetensors"), options, &sink, "job-1"),
      StatusIs(absl::StatusCode::kPermissionDenied, ::testing::HasSubstr("taken/x.safetensors")));
  EXPECT_TRUE(sink.steps.empty());
  EXPECT_EQ(ReadAll(options.checkpoint_dir + "/job-1/taken"), "a file already there");
  std::filesystem::remove_all(options.checkpoint_dir);
}

}  // namespace
}  // namespace lockstep::testing
