// A job reading its samples from .npz files (what numpy writes), against real replicas in
// this process: it trains bit for bit as the same images from IDX files do, and a file
// the model does not fit fails the job naming the file and the array.
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/dataset.h"
#include "core/data/npz_testing.h"
#include "core/spec/spec.h"
#include "core/spec/testing.h"
#include "core/testing.h"
#include "services/coordinator/jobs/job_runner.h"
#include "services/standalone/testing.h"

namespace lockstep::testing {
namespace {

// Fashion-MNIST's IDX files written as one .npz per split into `dir` (uint8 images
// [N, 28, 28, 1], int64 labels; the training split STORED as np.savez writes it, the test
// split DEFLATED as np.savez_compressed does); a 2-worker MLP spec of 20 steps reading them.
v1::JobSpec FashionMnistAsNpzSpec(const std::string& dir) {
  for (const auto& [split, compressed] : {std::pair("train", false), std::pair("t10k", true)}) {
    EXPECT_OK(WriteIdxAsNpz(absl::StrCat(kDefaultDatasetPath, "/", split),
                            absl::StrCat(dir, "/", split, ".npz"), compressed));
  }
  return ValidSpec(absl::StrCat(R"(
model: {kind: mlp, hidden: [32]}
optimizer: {kind: adam, learning_rate: 0.001}
dataset: {format: npz, train_path: )",
                                dir, "/train.npz, test_path: ", dir, R"(/t10k.npz}
global_batch_size: 32
eval: {every_steps: 10, batch_size: 500}
steps: 20
workers: 2
)"));
}

class EvalRecorder final : public JobSink {
 public:
  void OnRunning(int64_t) override {}
  void OnStep(const v1::StepEvent& e) override { losses.push_back(e.loss()); }
  void OnEval(const v1::EvalResult& e) override { evals.push_back(e.test_loss()); }
  std::vector<float> losses;
  std::vector<double> evals;
};

TEST(InProcessJobLoop, AnNpzDatasetTrainsBitForBitAsTheSameImagesFromIdx) {
  const std::string dir = TempDir("npz");
  const v1::JobSpec npz = FashionMnistAsNpzSpec(dir);
  v1::JobSpec idx = npz;
  idx.clear_dataset();
  ASSERT_OK_AND_ASSIGN(idx, Validate(idx));
  CoordinatorOptions options;
  options.checkpoint_dir = dir;
  std::vector<EvalRecorder> sinks(2);
  std::vector<uint64_t> checksums;
  for (int i = 0; i < 2; ++i) {
    InProcessWorkers workers(2);
    JobRunner runner(absl::StrCat("job-", i), i == 0 ? idx : npz, workers.pool_workers(),
                     workers.factory(), options, &sinks[i]);
    JobOutcome out;
    ASSERT_OK(runner.Run(&out));
    checksums.push_back(out.param_checksum);
  }
  ASSERT_EQ(sinks[1].losses.size(), 20u);
  EXPECT_EQ(sinks[1].losses, sinks[0].losses);
  EXPECT_EQ(sinks[1].evals, sinks[0].evals);
  EXPECT_EQ(checksums[1], checksums[0]);
  std::filesystem::remove_all(dir);
}

TEST(InProcessJobLoop, AnNpzDatasetTheModelDoesNotFitFailsTheJobNamingFileAndArray) {
  const std::string dir = TempDir("npz-misfit");
  const auto write = [&](const std::string& name, int channels, uint8_t label) {
    WriteFile(dir + "/" + name,
              NpzBytes(NpyBytes("|u1", {64, 28, 28, channels}, std::string(64 * 784 * channels, 1)),
                       NpyBytes("|u1", {64}, std::string(64, static_cast<char>(label)))));
  };
  write("rgb.npz", 3, 1);
  write("eleven.npz", 1, 10);
  write("ok.npz", 1, 9);
  const auto spec = [&](const std::string& train, const std::string& test = "ok.npz") {
    return ValidSpec(absl::StrCat(
        "model: {kind: mlp, hidden: [8]}\n", "optimizer: {kind: sgd, learning_rate: 0.1}\n",
        "dataset: {format: npz, train_path: ", dir, "/", train, ", test_path: ", dir, "/", test,
        "}\n", "global_batch_size: 32\nsteps: 2\n"));
  };
  CoordinatorOptions options;
  options.checkpoint_dir = dir;
  StepRecorder sink;
  EXPECT_THAT(RunInProcess(spec("rgb.npz", "rgb.npz"), options, &sink, "rgb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(::testing::HasSubstr("dataset.train_path: "),
                                        ::testing::HasSubstr("rgb.npz: array 'image'"),
                                        ::testing::HasSubstr("28x28x3 (HxWxC), the model takes "
                                                             "28x28x1"))));
  EXPECT_THAT(RunInProcess(spec("eleven.npz"), options, &sink, "eleven"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(::testing::HasSubstr("eleven.npz: array 'label'"),
                                        ::testing::HasSubstr("label 10 at index 0 is not in "
                                                             "[0, 10)"))));
  EXPECT_TRUE(sink.steps.empty());
  ASSERT_OK(RunInProcess(spec("ok.npz"), options, &sink, "ok"));
  EXPECT_EQ(sink.steps.size(), 2u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lockstep::testing
