// The sequence golden checks (tests/golden/sequence_*.safetensors, written by
// tools/reference/golden_sequence.py) on any backend: golden_sequence_test runs them on
// the CPU backend, workers/cuda/cuda_step_test on the CUDA backend.
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/data/token_dataset.h"
#include "tests/golden.h"

namespace lockstep::testing {

absl::StatusOr<SequenceGoldenFile> ReadSequenceGolden(const std::string& name) {
  ASSIGN_OR_RETURN(SpecGolden g, ReadSpecGolden("sequence_" + name + ".safetensors"));
  ASSIGN_OR_RETURN(std::vector<int32_t> stream, g.st.I32("data.stream"));
  ASSIGN_OR_RETURN(Dataset data, WindowTokens(stream, static_cast<int>(g.spec.dataset().context()),
                                              "data.stream", name));
  return SequenceGoldenFile{std::move(g), std::move(data)};
}

void ExpectSequenceGradientsMatchJax(Backend* backend, const std::string& name) {
  ASSERT_OK_AND_ASSIGN(SequenceGoldenFile f, ReadSequenceGolden(name));
  ASSERT_OK_AND_ASSIGN(GoldenGradients got,
                       GradientsAtInit(backend, f.g, f.data, GoldenDropoutKey(f.g.st)));
  const float want_loss = (*f.g.st.F32("grads.loss"))[0];
  EXPECT_NEAR(got.loss, want_loss, 1e-5 * std::fabs(want_loss));
  ExpectSequenceTensorsWithin1e5(f.g.setup.model, got.grads,
                                 GoldenParams(f.g.st, f.g.setup.model, "grads."));
}

void ExpectSequenceTrainingMatchesOptax(Backend* backend, const std::string& name) {
  ASSERT_OK_AND_ASSIGN(SequenceGoldenFile f, ReadSequenceGolden(name));
  const Model& m = f.g.setup.model;
  const int b = static_cast<int>(f.g.spec.global_batch_size());
  TrainingPlan plan(f.g.spec.seed(), f.g.spec.dropout_seed(), f.g.setup.impl, f.data.size, b, 1);
  ASSERT_OK_AND_ASSIGN(
      auto exec, StepExecutor::Create(m, f.g.setup.optimizer, f.g.setup.impl, b, backend, nullptr));
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
  ExpectSequenceTensorsWithin1e5(m, final_state.params, GoldenParams(f.g.st, m, "train.params."));
}

}  // namespace lockstep::testing
