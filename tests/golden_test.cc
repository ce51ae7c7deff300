// The C++ core against JAX/Flax/optax: initial params, loss and gradients of both
// models, and 20 training steps with dropout (adam and sgd with momentum), from the
// golden files tools/reference/make_golden.py wrote.
#include "tests/golden.h"

#include <nlohmann/json.hpp>
#include <numeric>

#include "core/io/safetensors.h"
#include "core/plan.h"
#include "core/spec/spec.h"
#include "core/step.h"
#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

using testing::GoldenDataset;
using testing::GoldenModelSpec;
using testing::GoldenParams;
using testing::GoldenPath;
using testing::RelativeL2;

class InitGolden : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(InitGolden, MatchesFlaxWithin1e6) {
  const auto [model_name, seed] = GetParam();
  ASSERT_OK_AND_ASSIGN(SafeTensors st,
                       SafeTensors::Read(GoldenPath(std::string("init_") + model_name + "_seed" +
                                                    std::to_string(seed) + ".safetensors")));
  ASSERT_OK_AND_ASSIGN(Model m, Model::FromSpec(GoldenModelSpec(st.metadata().at("model"))));
  EXPECT_EQ(st.tensors().size(), m.layout().entries().size());
  const auto impl = rng::Impl::kPartitionable;
  TrainingPlan plan(seed, seed, impl, 60000, 128, 1);
  const std::vector<float> mine = m.Init(plan.init_key(), impl);
  const std::vector<float> want = GoldenParams(st, m, "");
  for (const ParamEntry& e : m.layout().entries()) {
    std::span<const float> a(mine.data() + e.offset, e.size), b(want.data() + e.offset, e.size);
    EXPECT_LE(testing::MaxAbsDiff(a, b), 1e-6) << e.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, InitGolden,
                         ::testing::Combine(::testing::Values("cnn", "mlp"),
                                            ::testing::Values(0, 42)));

TEST(Golden, CnnCountsFlaxParams) { EXPECT_EQ(Model::Cnn().layout().total(), 824458u); }

class GradGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(GradGolden, LossAndEveryGradientWithin1e5) {
  const std::string name = GetParam();
  ASSERT_OK_AND_ASSIGN(SafeTensors g, SafeTensors::Read(GoldenPath("grads.safetensors")));
  ASSERT_OK_AND_ASSIGN(SafeTensors init,
                       SafeTensors::Read(GoldenPath("init_" + name + "_seed0.safetensors")));
  ASSERT_OK_AND_ASSIGN(Model m, Model::FromSpec(GoldenModelSpec(init.metadata().at("model"))));
  v1::OptimizerSpec os;
  os.set_kind("sgd");
  os.set_learning_rate(0.1);
  auto backend = NewCpuBackend(DefaultCpuThreads());
  ASSERT_OK_AND_ASSIGN(
      auto exec, StepExecutor::Create(m, *Optimizer::FromSpec(os), rng::Impl::kPartitionable, 16,
                                      backend.get(), nullptr));
  Dataset batch = GoldenDataset(g, "batch");
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(batch));
  TrainState state;
  state.params = GoldenParams(init, m, "");
  ASSERT_OK(exec->SetState(state));
  rng::Key key{};
  if (name == "mlp") {
    auto k = *g.U32("mlp.dropout_key");
    key = {k[0], k[1]};
  }
  std::vector<int32_t> idx(16);
  std::iota(idx.begin(), idx.end(), 0);
  ASSERT_OK_AND_ASSIGN(StepMetrics metrics, exec->ComputeGradients(d, idx, key));
  const float want_loss = (*g.F32(name + ".loss"))[0];
  EXPECT_NEAR(metrics.loss, want_loss, 1e-5 * std::fabs(want_loss));
  ASSERT_OK_AND_ASSIGN(std::vector<float> grads, exec->Gradients());
  const std::vector<float> want = GoldenParams(g, m, name + ".grads.");
  for (const ParamEntry& e : m.layout().entries()) {
    EXPECT_LE(RelativeL2({grads.data() + e.offset, e.size}, {want.data() + e.offset, e.size}), 1e-5)
        << e.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GradGolden, ::testing::Values("cnn", "mlp"));

class TrainGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(TrainGolden, TwentyDropoutStepsMatchOptax) {
  ASSERT_OK_AND_ASSIGN(SafeTensors g, SafeTensors::Read(GoldenPath(std::string("train_mlp_") +
                                                                   GetParam() + ".safetensors")));
  ASSERT_OK_AND_ASSIGN(v1::JobSpec parsed, ParseSpec(g.metadata().at("spec"), "golden spec"));
  ASSERT_OK_AND_ASSIGN(v1::JobSpec spec, Validate(parsed));
  ASSERT_OK_AND_ASSIGN(Model m, Model::FromSpec(spec.model()));
  ASSERT_OK_AND_ASSIGN(Optimizer opt, Optimizer::FromSpec(spec.optimizer()));
  const auto impl = rng::Impl::kPartitionable;
  Dataset data = GoldenDataset(g, "data");
  const int b = static_cast<int>(spec.global_batch_size());
  TrainingPlan plan(spec.seed(), spec.dropout_seed(), impl, data.size, b, 1);
  auto backend = NewCpuBackend(DefaultCpuThreads());
  ASSERT_OK_AND_ASSIGN(auto exec, StepExecutor::Create(m, opt, impl, b, backend.get(), nullptr));
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(data));
  ASSERT_OK(exec->SetState(TrainState::Create(m.Init(plan.init_key(), impl), opt)));
  const std::vector<float> losses = *g.F32("losses");
  ASSERT_EQ(losses.size(), spec.steps());
  for (uint64_t s = 0; s < spec.steps(); ++s) {
    StepPlan p = plan.Next();
    ASSERT_OK_AND_ASSIGN(StepMetrics metrics, exec->Step(d, p.indices, p.keys[0]));
    EXPECT_NEAR(metrics.loss, losses[s], 1e-5 * std::fabs(losses[s])) << "step " << s;
    ASSERT_OK_AND_ASSIGN(auto masks, exec->DropoutMasks());
    ASSERT_EQ(masks.size(), 2u);
    for (size_t i = 0; i < masks.size(); ++i) {
      EXPECT_EQ(masks[i], *g.U8("masks." + std::to_string(s) + "." + std::to_string(i)))
          << "step " << s << " dropout " << i;
    }
  }
  ASSERT_OK_AND_ASSIGN(TrainState final_state, exec->GetState());
  EXPECT_EQ(final_state.step, 20);
  const std::vector<float> want = GoldenParams(g, m, "params.");
  for (const ParamEntry& e : m.layout().entries()) {
    EXPECT_LE(RelativeL2({final_state.params.data() + e.offset, e.size},
                         {want.data() + e.offset, e.size}),
              1e-5)
        << e.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, TrainGolden, ::testing::Values("adam", "sgd"));

}  // namespace
}  // namespace lockstep
