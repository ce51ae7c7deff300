// StepExecutor on a sequence model and a token dataset (the fortunes corpus as bytes):
// evaluation is the per-token loss and accuracy (checked against the same model computed
// by hand on the host), uneven evaluation batches agree with one batch, and training
// lowers the loss. A transformer decoder block (residual connections around attention and
// an MLP, in a named block) has Flax's nested names and gradients that agree with finite
// differences of the loss.
#include <algorithm>
#include <cmath>

#include "core/data/token_dataset.h"
#include "core/model_spec.h"
#include "core/optimizer_spec.h"
#include "core/plan.h"
#include "core/spec/spec.h"
#include "core/step.h"
#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

constexpr char kCorpus[] = "/usr/share/games/fortunes/cookie";
constexpr int kContext = 16;

Model Bigram() {  // embed, then logits per position: a bigram model of bytes
  auto spec = ParseSpec(R"(
model:
  input_shape: [16]
  layers: [{embed: {num_embeddings: 256, features: 8}}, {dense: {features: 256}}]
)",
                        "bigram.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *ModelFromSpec(spec->model());
}

Optimizer Adam() {
  v1::OptimizerSpec spec;
  spec.set_kind("adam");
  spec.set_learning_rate(0.05);
  return *OptimizerFromSpec(spec);
}

// The mean per-token loss and accuracy of Bigram() with `params` over windows [0, n).
std::pair<double, double> HostEval(const Model& m, const std::vector<float>& p, const Dataset& ds,
                                   int n) {
  const auto& e = m.layout().entries();
  const float *table = p.data() + e[0].offset, *kernel = p.data() + e[1].offset,
              *bias = p.data() + e[2].offset;
  double loss = 0, correct = 0;
  for (int64_t i = 0; i < int64_t{n} * kContext; ++i) {
    const float* x = table + static_cast<int64_t>(ds.images[i]) * 8;
    std::vector<double> z(256);
    int argmax = 0;
    for (int c = 0; c < 256; ++c) {
      z[c] = bias[c];
      for (int f = 0; f < 8; ++f) z[c] += double{x[f]} * kernel[f * 256 + c];
      if (z[c] > z[argmax]) argmax = c;
    }
    double sum = 0;
    for (int c = 0; c < 256; ++c) sum += std::exp(z[c] - z[argmax]);
    loss += -(z[ds.labels[i]] - z[argmax] - std::log(sum));
    correct += argmax == ds.labels[i];
  }
  return {loss / (n * kContext), correct / (n * kContext)};
}

TEST(SequenceStep, EvaluationIsPerTokenAndTrainingLowersTheLoss) {
  ASSERT_OK_AND_ASSIGN(Dataset ds, LoadTextDataset(kCorpus, "dataset.train_path", kContext));
  const Model m = Bigram();
  ASSERT_OK(CheckDatasetFitsModel(ds, m));
  const Optimizer adam = Adam();
  auto backend = NewCpuBackend(2);
  ASSERT_OK_AND_ASSIGN(auto exec, StepExecutor::Create(m, adam, rng::Impl::kPartitionable, 32,
                                                       backend.get(), nullptr));
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(ds));
  const std::vector<float> init =
      m.Init(TrainingPlan::InitKey(0, rng::Impl::kPartitionable), rng::Impl::kPartitionable);
  ASSERT_OK(exec->SetState(TrainState::Create(init, adam)));

  constexpr int kEval = 50;
  ASSERT_OK_AND_ASSIGN(EvalMetrics one, exec->Evaluate(d, kEval, 0, kEval));
  ASSERT_OK_AND_ASSIGN(EvalMetrics uneven, exec->Evaluate(d, 7, 0, kEval));
  const auto [loss, accuracy] = HostEval(m, init, ds, kEval);
  EXPECT_NEAR(one.loss, loss, 1e-5 * loss);
  EXPECT_NEAR(one.accuracy, accuracy, 1e-6);
  EXPECT_NEAR(uneven.loss, one.loss, 1e-5 * one.loss);
  EXPECT_EQ(one.count, kEval);
  EXPECT_NEAR(one.loss, std::log(256.0), 0.1);  // near uniform at init

  TrainingPlan plan(0, 0, rng::Impl::kPartitionable, ds.size, 32, 1);
  float first = 0, last = 0;
  for (int s = 0; s < 60; ++s) {
    const StepPlan p = plan.Next();
    ASSERT_OK_AND_ASSIGN(StepMetrics metrics, exec->Step(d, p.indices, p.keys[0]));
    (s == 0 ? first : last) = metrics.loss;
  }
  EXPECT_LT(last, first - 1.0f) << "a bigram model of English bytes learns in 60 steps";
  ASSERT_OK_AND_ASSIGN(EvalMetrics after, exec->Evaluate(d, 1000, 0, 1000));
  EXPECT_LT(after.loss, one.loss - 1.0);
  EXPECT_GT(after.accuracy, 0.15);  // ' ' after 'e', 'h' after 't', ...
}

// Two pre-norm decoder blocks: x + attention(norm(x)), then x + mlp(norm(x)).
constexpr char kDecoder[] = R"(
model:
  input_shape: [16]
  blocks:
    DecoderBlock:
      args: {heads: null, features: 16}
      layers:
        - residual:
            layers:
              - layer_norm: {}
              - multi_head_attention: {num_heads: $heads, causal: true}
        - residual:
            layers:
              - layer_norm: {}
              - dense: {features: 32}
              - gelu: {}
              - dense: {features: $features}
  layers:
    - embed: {num_embeddings: 256, features: 16}
    - position_embed: {}
    - block: {module: DecoderBlock, args: {heads: 2}}
    - block: {module: DecoderBlock, args: {heads: 4}}
    - layer_norm: {}
    - dense: {features: 256}
)";

TEST(SequenceStep, DecoderBlocksNestNamesAndTheirGradientsMatchFiniteDifferences) {
  ASSERT_OK_AND_ASSIGN(v1::JobSpec spec, ParseSpec(kDecoder, "decoder.yaml"));
  ASSERT_OK_AND_ASSIGN(Model m, ModelFromSpec(spec.model()));
  std::vector<std::string> names;
  for (const ParamEntry& e : m.layout().entries()) names.push_back(e.name);
  ASSERT_EQ(names.size(), 2u + 2 * 16 + 4);
  EXPECT_EQ(names[0], "Embed_0/embedding");
  EXPECT_EQ(names[1], "Embed_1/embedding");
  EXPECT_EQ(names[2], "DecoderBlock_0/LayerNorm_0/scale");
  EXPECT_EQ(names[4], "DecoderBlock_0/MultiHeadDotProductAttention_0/query/kernel");
  EXPECT_EQ(names[11], "DecoderBlock_0/MultiHeadDotProductAttention_0/out/bias");
  EXPECT_EQ(names[12], "DecoderBlock_0/LayerNorm_1/scale");
  EXPECT_EQ(names[17], "DecoderBlock_0/Dense_1/bias");
  EXPECT_EQ(names[20], "DecoderBlock_1/MultiHeadDotProductAttention_0/query/kernel");
  EXPECT_EQ(names[34], "LayerNorm_0/scale");
  EXPECT_EQ(names[36], "Dense_0/kernel");
  EXPECT_EQ(m.layout().entries()[20].shape, (std::vector<int64_t>{16, 4, 4}));
  EXPECT_EQ(m.positions(), 16);

  ASSERT_OK_AND_ASSIGN(Dataset ds, LoadTextDataset(kCorpus, "dataset.train_path", kContext));
  const Optimizer adam = Adam();
  auto backend = NewCpuBackend(2);
  constexpr int kBatch = 8;
  ASSERT_OK_AND_ASSIGN(auto exec, StepExecutor::Create(m, adam, rng::Impl::kPartitionable, kBatch,
                                                       backend.get(), nullptr));
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(ds));
  const std::vector<float> init =
      m.Init(TrainingPlan::InitKey(0, rng::Impl::kPartitionable), rng::Impl::kPartitionable);
  ASSERT_OK(exec->SetState(TrainState::Create(init, adam)));
  std::vector<int32_t> batch(kBatch);
  for (int i = 0; i < kBatch; ++i) batch[i] = 3 * i;
  const rng::Key key{0, 0};
  ASSERT_OK(exec->ComputeGradients(d, batch, key).status());
  ASSERT_OK_AND_ASSIGN(std::vector<float> grads, exec->Gradients());

  // Each tensor's largest gradient against a central difference of the loss: the embedding
  // (read by both residual branches of both blocks), the attention's and the MLP's.
  int checked = 0;
  for (const ParamEntry& e : m.layout().entries()) {
    const auto first = grads.begin() + e.offset;
    const size_t at =
        e.offset + (std::max_element(first, first + e.size,
                                     [](float a, float b) { return std::abs(a) < std::abs(b); }) -
                    grads.begin() - e.offset);
    if (std::abs(grads[at]) < 1e-4f) continue;  // a key bias: its true gradient is 0
    constexpr float kEps = 1e-2f;
    double loss[2];
    for (int side = 0; side < 2; ++side) {
      std::vector<float> p = init;
      p[at] += side == 0 ? kEps : -kEps;
      ASSERT_OK(exec->SetState(TrainState::Create(p, adam)));
      ASSERT_OK_AND_ASSIGN(StepMetrics metrics, exec->ComputeGradients(d, batch, key));
      loss[side] = metrics.loss;
    }
    const double numeric = (loss[0] - loss[1]) / (2 * kEps);
    EXPECT_NEAR(numeric, grads[at], 0.05 * std::abs(grads[at]) + 2e-4) << e.name;
    ++checked;
  }
  EXPECT_GE(checked, 30);  // of 38 tensors; the key biases (and any below 1e-4) skipped

  // And Adam lowers the loss on the corpus.
  ASSERT_OK(exec->SetState(TrainState::Create(init, adam)));
  TrainingPlan plan(0, 0, rng::Impl::kPartitionable, ds.size, kBatch, 1);
  float first = 0, last = 0;
  for (int s = 0; s < 40; ++s) {
    const StepPlan p = plan.Next();
    ASSERT_OK_AND_ASSIGN(StepMetrics metrics, exec->Step(d, p.indices, p.keys[0]));
    (s == 0 ? first : last) = metrics.loss;
  }
  EXPECT_LT(last, first - 1.0f);
}

}  // namespace
}  // namespace lockstep
