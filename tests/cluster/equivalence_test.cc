// Data-parallel equivalence, across real processes: N workers on global batch B end with
// the parameters of 1 worker and of `lockstep train`'s job loop (no dropout), and 2
// workers with dropout end with JAX pmap's parameters (golden file), as do 2 workers
// training a BatchNorm convnet and a small ResNet (residual blocks with projections, Flax's
// nested names), running averages included (their statistics all-reduced across the
// worker processes), and a GPT-style decoder on a token dataset. Replicas end bitwise identical,
// and each step's loss is the mean of the workers' local losses.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <map>

#include "core/checkpoint.h"
#include "core/data/npz_testing.h"
#include "core/io/safetensors.h"
#include "core/model_spec.h"
#include "core/optimizer_spec.h"
#include "core/spec/spec.h"
#include "core/testing.h"
#include "services/standalone/local_job.h"
#include "tests/cluster/local_cluster.h"
#include "tests/golden.h"

namespace lockstep::testing {
namespace {

class Equivalence : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A data root of the suite's own (golden data written as .npz), besides the defaults.
    data_root_ = new std::string(
        (std::filesystem::temp_directory_path() / absl::StrCat("lockstep-equivalence-", getpid()))
            .string());
    std::filesystem::create_directories(*data_root_);
    const std::string roots = absl::StrCat("--data_root=", *data_root_, ",", kDefaultDataRoots);
    ClusterOptions options;
    options.workers = 4;
    options.coordinator_flags = {roots};
    options.worker_flags = {roots};
    auto c = LocalCluster::Start(options);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    std::filesystem::remove_all(*data_root_);
    delete data_root_;
  }

  // Runs the spec on the cluster; returns the final params from its checkpoint (and the
  // whole state in `final_state`, its evaluations in `evals`, when given).
  std::vector<float> RunOnCluster(v1::JobSpec spec, const std::string& name,
                                  std::vector<v1::StepEvent>* steps = nullptr,
                                  TrainState* final_state = nullptr,
                                  std::vector<v1::EvalResult>* evals = nullptr) {
    spec.set_checkpoint_path(name + ".safetensors");
    auto job = cluster_->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return {};
    if (steps != nullptr || evals != nullptr) {
      auto events = cluster_->Events(job->id());
      EXPECT_TRUE(events.ok()) << events.status();
      for (const v1::JobEvent& e : events.value_or(std::vector<v1::JobEvent>())) {
        if (e.has_step() && steps != nullptr) steps->push_back(e.step());
        if (e.has_eval() && evals != nullptr) evals->push_back(e.eval());
      }
    }
    auto done = cluster_->WaitFor(job->id(), absl::Minutes(5));
    EXPECT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->state(), v1::SUCCEEDED) << done->failure_reason() << "\n" << cluster_->Logs();
    auto model = ModelFromSpec(spec.model());
    auto opt = OptimizerFromSpec(spec.optimizer());
    auto state = ReadCheckpoint(done->checkpoint_path(), *model, *opt);
    EXPECT_TRUE(state.ok()) << state.status();
    if (!state.ok()) return {};
    // The coordinator compared every replica's checksum (params and batch_stats); the saved
    // state carries it.
    EXPECT_EQ(ParamChecksum(state->params, state->batch_stats), done->param_checksum());
    EXPECT_EQ(state->step, spec.steps());
    if (final_state != nullptr) *final_state = *state;
    return state->params;
  }

  static void ExpectClose(const Model& m, const std::vector<float>& a, const std::vector<float>& b,
                          const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (const ParamEntry& e : m.layout().entries()) {
      EXPECT_LE(RelativeL2({a.data() + e.offset, e.size}, {b.data() + e.offset, e.size}), 1e-5)
          << what << ": " << e.name;
    }
  }

  // Writes `npz` as the file `name` in the suite's data root; its path.
  static absl::StatusOr<std::string> WriteInDataRoot(const std::string& name,
                                                     const ZipWriter& npz) {
    const std::string path = *data_root_ + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out << npz.Finish();
    if (!out.good()) return absl::DataLossError(absl::StrCat("cannot write ", path));
    return path;
  }

  static LocalCluster* cluster_;
  static std::string* data_root_;
};

LocalCluster* Equivalence::cluster_ = nullptr;
std::string* Equivalence::data_root_ = nullptr;

TEST_F(Equivalence, OneTwoFourWorkersAndSingleProcessAgree) {
  const v1::JobSpec base = MlpSpec(1, 100);
  auto model = ModelFromSpec(base.model());
  ASSERT_OK(model);
  std::map<int, std::vector<float>> params;
  for (int n : {1, 2, 4}) {
    v1::JobSpec spec = base;
    spec.set_workers(n);
    std::vector<v1::StepEvent> steps;
    params[n] = RunOnCluster(spec, "equiv" + std::to_string(n), &steps);
    ASSERT_EQ(steps.size(), 100u);
    for (const auto& s : steps) {
      ASSERT_EQ(s.local_losses_size(), n);
      float sum = 0;
      for (float l : s.local_losses()) sum += l;
      EXPECT_EQ(s.loss(), sum / static_cast<float>(n)) << "step " << s.step();
    }
  }
  auto validated = Validate(base);
  ASSERT_OK(validated);
  validated->set_checkpoint_path(cluster_->dir() + "/single.safetensors");
  NullJobSink sink;
  ASSERT_OK(RunLocalJob(*validated, &sink));
  auto opt = OptimizerFromSpec(base.optimizer());
  ASSERT_OK_AND_ASSIGN(TrainState single,
                       ReadCheckpoint(validated->checkpoint_path(), *model, *opt));
  ExpectClose(*model, params[2], params[1], "2 workers vs 1");
  ExpectClose(*model, params[4], params[1], "4 workers vs 1");
  ExpectClose(*model, params[1], single.params, "1 worker vs lockstep train");
}

TEST_F(Equivalence, TwoWorkersWithDropoutMatchJaxPmap) {
  auto golden = SafeTensors::Read(GoldenPath("pmap2_mlp_dropout.safetensors"));
  ASSERT_OK(golden);
  auto parsed = ParseSpec(golden->metadata().at("spec"), "golden spec");
  ASSERT_OK(parsed);
  auto model = ModelFromSpec(parsed->model());
  ASSERT_OK(model);
  std::vector<v1::StepEvent> steps;
  std::vector<float> mine = RunOnCluster(*parsed, "pmap2", &steps);
  const std::vector<float> want = GoldenParams(*golden, *model, "params.");
  ExpectClose(*model, mine, want, "2 workers vs jax.pmap");
  auto losses = golden->F32("losses");
  ASSERT_OK(losses);
  ASSERT_EQ(steps.size(), losses->size());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_NEAR(steps[i].loss(), (*losses)[i], 1e-5 * std::fabs((*losses)[i])) << "step " << i;
  }
}

TEST_F(Equivalence, TwoWorkersWithBatchNormMatchJaxPmap) {
  ASSERT_OK_AND_ASSIGN(SafeTensors golden,
                       SafeTensors::Read(GoldenPath("batchnorm_pmap2_fashion.safetensors")));
  ASSERT_OK_AND_ASSIGN(v1::JobSpec parsed, ParseSpec(golden.metadata().at("spec"), "golden spec"));
  ASSERT_EQ(parsed.workers(), 2u);
  ASSERT_OK_AND_ASSIGN(Model model, ModelFromSpec(parsed.model()));
  ASSERT_GT(model.stats_layout().total(), 0u);
  std::vector<v1::StepEvent> steps;
  TrainState state;
  RunOnCluster(parsed, "batchnorm2", &steps, &state);
  // The biases right before a BatchNorm get gradients of rounding noise only (the norm
  // subtracts any shift; JAX's end within 2e-7 of 0, ours within 1e-5, summed in another
  // order): those must stay within 1e-5 of the layer's kernel norm, the rest within 1e-5
  // relative L2.
  const std::vector<float> want = GoldenParams(golden, model, "train.params.");
  const auto& entries = model.layout().entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    const ParamEntry& e = entries[i];
    const std::span<const float> a(state.params.data() + e.offset, e.size),
        b(want.data() + e.offset, e.size);
    if (e.name == "Conv_0/bias" || e.name == "Dense_0/bias") {
      const ParamEntry& k = entries[i - 1];  // the layer's kernel
      ASSERT_EQ(k.name, e.name.substr(0, e.name.find('/')) + "/kernel");
      double norm = 0;
      for (size_t j = 0; j < k.size; ++j) norm += double{want[k.offset + j]} * want[k.offset + j];
      EXPECT_LE(MaxAbsDiff(a, b), 1e-5 * std::sqrt(norm)) << e.name;
    } else {
      EXPECT_LE(RelativeL2(a, b), 1e-5) << e.name;
    }
  }
  ASSERT_EQ(state.batch_stats.size(), model.stats_layout().total());
  for (const ParamEntry& e : model.stats_layout().entries()) {
    auto want = golden.F32("train.stats." + e.name);
    ASSERT_OK(want);
    EXPECT_LE(RelativeL2({state.batch_stats.data() + e.offset, e.size}, *want), 1e-5) << e.name;
  }
  ASSERT_OK_AND_ASSIGN(std::vector<float> losses, golden.F32("train.losses"));
  ASSERT_EQ(steps.size(), losses.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_NEAR(steps[i].loss(), losses[i], 1e-5 * std::fabs(losses[i])) << "step " << i;
  }
}

// tools/reference/golden_resnet.py's run: a ResNet of two ResNetBlocks (the second strided,
// with its 1x1 conv + BatchNorm projection) on 64 random 8x8x3 images, adam, 20 steps of
// global batch 16 under pmap over 2 devices, then evaluated on the same images. Here the
// images go to a worker as an .npz dataset, both splits.
TEST_F(Equivalence, TwoWorkersTrainAResNetAsJaxPmap) {
  ASSERT_OK_AND_ASSIGN(SafeTensors golden,
                       SafeTensors::Read(GoldenPath("resnet_pmap2_adam.safetensors")));
  ASSERT_OK_AND_ASSIGN(v1::JobSpec spec, ParseSpec(golden.metadata().at("spec"), "golden spec"));
  ASSERT_EQ(spec.workers(), 2u);
  ASSERT_OK_AND_ASSIGN(Model model, ModelFromSpec(spec.model()));
  ASSERT_OK_AND_ASSIGN(std::vector<float> images, golden.F32("data.images"));
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> labels, golden.I32("data.labels"));
  const int64_t n = static_cast<int64_t>(labels.size());
  ZipWriter npz;
  npz.Add("image.npy", NpyBytes("<f4", {n, 8, 8, 3}, RawBytes(images)));
  npz.Add("label.npy", NpyBytes("<i4", {n}, RawBytes(labels)));
  ASSERT_OK_AND_ASSIGN(const std::string path, WriteInDataRoot("resnet.npz", npz));
  v1::DatasetSpec* d = spec.mutable_dataset();
  d->set_format("npz");
  d->set_train_path(path);
  d->set_test_path(path);
  std::vector<v1::StepEvent> steps;
  TrainState state;
  std::vector<v1::EvalResult> evals;
  RunOnCluster(spec, "resnet2", &steps, &state, &evals);
  ASSERT_EQ(state.params.size(), model.layout().total());
  ExpectEveryTensorWithin(model, state.params, GoldenParams(golden, model, "train.params."), 1e-5);
  ExpectEveryTensorWithin(model.stats_layout(), state.batch_stats,
                          GoldenLayoutTensors(golden, model.stats_layout(), "train.stats."), 1e-5);
  ASSERT_OK_AND_ASSIGN(std::vector<float> losses, golden.F32("train.losses"));
  ASSERT_EQ(steps.size(), losses.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_NEAR(steps[i].loss(), losses[i], 1e-5 * std::fabs(losses[i])) << "step " << i;
  }
  // The final evaluation, with the running averages.
  ASSERT_FALSE(evals.empty());
  const float eval_loss = (*golden.F32("eval.loss"))[0];
  EXPECT_NEAR(evals.back().test_loss(), eval_loss, 1e-5 * std::fabs(eval_loss));
  EXPECT_NEAR(evals.back().test_accuracy(), (*golden.F32("eval.accuracy"))[0], 1e-6);
  EXPECT_EQ(evals.back().examples(), n);
}

// tools/reference/golden_sequence.py's decoder (two DecoderBlocks: causal self-attention
// and an MLP in pre-norm residuals, dropout) on a random token stream: 20 steps of global
// batch 8 under pmap over 2 devices, then evaluated on every window of the stream. Here the
// stream goes to the workers as a `tokens` .npz dataset, both splits.
TEST_F(Equivalence, TwoWorkersTrainADecoderOnTokensAsJaxPmap) {
  ASSERT_OK_AND_ASSIGN(SafeTensors golden,
                       SafeTensors::Read(GoldenPath("sequence_decoder_pmap2.safetensors")));
  ASSERT_OK_AND_ASSIGN(v1::JobSpec spec, ParseSpec(golden.metadata().at("spec"), "golden spec"));
  ASSERT_EQ(spec.workers(), 2u);
  ASSERT_OK_AND_ASSIGN(Model model, ModelFromSpec(spec.model()));
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> stream, golden.I32("data.stream"));
  ZipWriter npz;
  npz.Add("tokens.npy", NpyBytes("<i4", {static_cast<int64_t>(stream.size())}, RawBytes(stream)));
  ASSERT_OK_AND_ASSIGN(const std::string path, WriteInDataRoot("decoder.npz", npz));
  spec.mutable_dataset()->set_train_path(path);
  spec.mutable_dataset()->set_test_path(path);
  std::vector<v1::StepEvent> steps;
  TrainState state;
  std::vector<v1::EvalResult> evals;
  RunOnCluster(spec, "decoder2", &steps, &state, &evals);
  ASSERT_EQ(state.params.size(), model.layout().total());
  ExpectSequenceTensorsWithin1e5(model, state.params, GoldenParams(golden, model, "train.params."));
  ASSERT_OK_AND_ASSIGN(std::vector<float> losses, golden.F32("train.losses"));
  ASSERT_EQ(steps.size(), losses.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_NEAR(steps[i].loss(), losses[i], 1e-5 * std::fabs(losses[i])) << "step " << i;
  }
  // The mean per-token loss over every window within 1e-5; the accuracy within two of its
  // 384 tokens: 20 steps into training on random tokens, a few positions' best logits are
  // tied to within the rounding that separates two float32 runs, so argmax may differ.
  ASSERT_FALSE(evals.empty());
  const float eval_loss = (*golden.F32("eval.loss"))[0];
  EXPECT_NEAR(evals.back().test_loss(), eval_loss, 1e-5 * std::fabs(eval_loss));
  EXPECT_EQ(evals.back().examples(), 32);
  EXPECT_NEAR(evals.back().test_accuracy(), (*golden.F32("eval.accuracy"))[0], 2.0 / 384 + 1e-6);
}

}  // namespace
}  // namespace lockstep::testing
