// Sequence models (embed, position_embed, dense/layer_norm/gelu/dropout on [T, F],
// multi_head_attention, the token-level loss) against Flax building the same spec
// (tools/reference/golden_sequence.py): initial params, the loss and every gradient, and
// 20 training steps with dropout and the same masks, on a token stream windowed as
// Lockstep windows token datasets.
#include <cmath>
#include <numeric>
#include <span>

#include "core/data/token_dataset.h"
#include "core/io/safetensors.h"
#include "core/plan.h"
#include "core/testing.h"
#include "tests/golden.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

using testing::GoldenParams;

struct Golden {
  testing::SpecGolden g;
  Dataset data;
};

absl::StatusOr<Golden> Read(const std::string& name) {
  ASSIGN_OR_RETURN(testing::SpecGolden g,
                   testing::ReadSpecGolden("sequence_" + name + ".safetensors"));
  ASSIGN_OR_RETURN(std::vector<int32_t> stream, g.st.I32("data.stream"));
  ASSIGN_OR_RETURN(Dataset data, WindowTokens(stream, static_cast<int>(g.spec.dataset().context()),
                                              "data.stream", name));
  return Golden{std::move(g), std::move(data)};
}

class SequenceGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(SequenceGolden, InitMatchesFlaxWithin1e6) {
  ASSERT_OK_AND_ASSIGN(Golden f, Read(GetParam()));
  int init_tensors = 0;
  for (const auto& [name, t] : f.g.st.tensors()) init_tensors += name.rfind("init.", 0) == 0;
  EXPECT_EQ(init_tensors, static_cast<int>(f.g.setup.model.layout().entries().size()));
  testing::ExpectInitWithin1e6(f.g);
}

TEST_P(SequenceGolden, DatasetFitsTheModel) {
  ASSERT_OK_AND_ASSIGN(Golden f, Read(GetParam()));
  EXPECT_OK(CheckDatasetFitsModel(f.data, f.g.setup.model));
  Dataset wider = f.data;
  wider.max_token = f.g.setup.model.vocabulary();
  EXPECT_THAT(CheckDatasetFitsModel(wider, f.g.setup.model),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                ::testing::HasSubstr("has num_embeddings")));
}

TEST_P(SequenceGolden, TokenLossAndEveryGradientWithin1e5) {
  ASSERT_OK_AND_ASSIGN(Golden f, Read(GetParam()));
  const Model& m = f.g.setup.model;
  const int b = static_cast<int>(f.g.spec.global_batch_size());
  auto backend = NewCpuBackend(DefaultCpuThreads());
  ASSERT_OK_AND_ASSIGN(auto exec, StepExecutor::Create(m, f.g.setup.optimizer, f.g.setup.impl, b,
                                                       backend.get(), nullptr));
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(f.data));
  ASSERT_OK(
      exec->SetState(TrainState::Create(GoldenParams(f.g.st, m, "init."), f.g.setup.optimizer)));
  const std::vector<uint32_t> k = *f.g.st.U32("grads.dropout_key");
  std::vector<int32_t> idx(b);
  std::iota(idx.begin(), idx.end(), 0);
  ASSERT_OK_AND_ASSIGN(StepMetrics metrics, exec->ComputeGradients(d, idx, {k[0], k[1]}));
  const float want_loss = (*f.g.st.F32("grads.loss"))[0];
  EXPECT_NEAR(metrics.loss, want_loss, 1e-5 * std::fabs(want_loss));
  ASSERT_OK_AND_ASSIGN(std::vector<float> grads, exec->Gradients());
  testing::ExpectSequenceTensorsWithin1e5(m, grads, GoldenParams(f.g.st, m, "grads."));
}

TEST_P(SequenceGolden, TwentyStepsWithDropoutMatchOptax) {
  ASSERT_OK_AND_ASSIGN(Golden f, Read(GetParam()));
  const Model& m = f.g.setup.model;
  const int b = static_cast<int>(f.g.spec.global_batch_size());
  TrainingPlan plan(f.g.spec.seed(), f.g.spec.dropout_seed(), f.g.setup.impl, f.data.size, b, 1);
  auto backend = NewCpuBackend(DefaultCpuThreads());
  ASSERT_OK_AND_ASSIGN(auto exec, StepExecutor::Create(m, f.g.setup.optimizer, f.g.setup.impl, b,
                                                       backend.get(), nullptr));
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(f.data));
  ASSERT_OK(exec->SetState(
      TrainState::Create(m.Init(plan.init_key(), f.g.setup.impl), f.g.setup.optimizer)));
  const std::vector<float> losses = *f.g.st.F32("train.losses");
  ASSERT_EQ(losses.size(), f.g.spec.steps());
  for (uint64_t s = 0; s < f.g.spec.steps(); ++s) {
    StepPlan p = plan.Next();
    ASSERT_OK_AND_ASSIGN(StepMetrics metrics, exec->Step(d, p.indices, p.keys[0]));
    EXPECT_NEAR(metrics.loss, losses[s], 1e-5 * std::fabs(losses[s])) << "step " << s;
    ASSERT_OK_AND_ASSIGN(auto masks, exec->DropoutMasks());
    const std::string prefix = "masks." + std::to_string(s) + ".";
    for (size_t i = 0; i < masks.size(); ++i) {
      ASSERT_TRUE(f.g.st.tensors().contains(prefix + std::to_string(i))) << prefix << i;
      EXPECT_EQ(masks[i], *f.g.st.U8(prefix + std::to_string(i))) << prefix << i;
    }
    EXPECT_FALSE(f.g.st.tensors().contains(prefix + std::to_string(masks.size())));
  }
  ASSERT_OK_AND_ASSIGN(TrainState final_state, exec->GetState());
  testing::ExpectSequenceTensorsWithin1e5(m, final_state.params,
                                          GoldenParams(f.g.st, m, "train.params."));
}

INSTANTIATE_TEST_SUITE_P(Models, SequenceGolden,
                         ::testing::Values("embed", "attention", "decoder"));

}  // namespace
}  // namespace lockstep
