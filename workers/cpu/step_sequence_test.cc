// StepExecutor on a sequence model and a token dataset (the fortunes corpus as bytes):
// evaluation is the per-token loss and accuracy (checked against the same model computed
// by hand on the host), uneven evaluation batches agree with one batch, and training
// lowers the loss.
#include <cmath>

#include "core/data/token_dataset.h"
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
  return *Model::FromSpec(spec->model());
}

Optimizer Adam() {
  v1::OptimizerSpec spec;
  spec.set_kind("adam");
  spec.set_learning_rate(0.05);
  return *Optimizer::FromSpec(spec);
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

}  // namespace
}  // namespace lockstep
