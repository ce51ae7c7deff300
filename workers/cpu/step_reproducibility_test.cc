// The CNN's training steps on the CPU backend (oneDNN convolutions, OpenBLAS GEMMs) give
// the same parameter bits run to run for a fixed thread count: twice on one backend (its
// cached primitives reused) and once more on a fresh backend (primitives built anew).
#include <cstring>
#include <random>

#include "core/data/random_dataset.h"
#include "core/optimizer_spec.h"
#include "core/plan.h"
#include "core/step.h"
#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

constexpr int kBatch = 128, kSteps = 5;

Optimizer SgdMomentum() {
  v1::OptimizerSpec spec;
  spec.set_kind("sgd");
  spec.set_learning_rate(0.1);
  spec.set_momentum(0.9);
  return *OptimizerFromSpec(spec);
}

class StepReproducibility : public ::testing::TestWithParam<int> {
 protected:
  // kSteps of the CNN from the same initial state and plan; the params after them.
  std::vector<float> Train(Backend& backend) {
    const Model model = Model::Cnn();
    const Optimizer optimizer = SgdMomentum();
    TrainingPlan init_plan(0, 1, impl_, data_.size, kBatch, 1);
    const TrainState init = TrainState::Create(model.Init(init_plan.init_key(), impl_), optimizer);
    auto exec = StepExecutor::Create(model, optimizer, impl_, kBatch, &backend, nullptr);
    EXPECT_TRUE(exec.ok()) << exec.status();
    if (!exec.ok()) return {};
    auto data = (*exec)->Upload(data_);
    EXPECT_TRUE(data.ok()) << data.status();
    EXPECT_TRUE((*exec)->SetState(init).ok());
    TrainingPlan plan(3, 4, impl_, data_.size, kBatch, 1);
    for (int s = 0; s < kSteps; ++s) {
      const StepPlan p = plan.Next();
      auto m = (*exec)->Step(*data, p.indices, p.keys[0]);
      EXPECT_TRUE(m.ok()) << m.status();
    }
    auto state = (*exec)->GetState();
    EXPECT_TRUE(state.ok()) << state.status();
    EXPECT_NE(state->params, init.params) << "the steps did not update the params";
    return state->params;
  }

  const rng::Impl impl_ = rng::Impl::kPartitionable;
  const Dataset data_ = RandomDataset(512, 1);
};

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_P(StepReproducibility, CnnParamsAreBitwiseEqualRunToRun) {
  auto backend = NewCpuBackend(GetParam());
  const std::vector<float> first = Train(*backend);
  ASSERT_FALSE(first.empty());
  EXPECT_TRUE(Bitwise(first, Train(*backend))) << "same backend, " << GetParam() << " threads";
  auto fresh = NewCpuBackend(GetParam());
  EXPECT_TRUE(Bitwise(first, Train(*fresh))) << "new backend, " << GetParam() << " threads";
}

INSTANTIATE_TEST_SUITE_P(Threads, StepReproducibility, ::testing::Values(1, 2));

}  // namespace
}  // namespace lockstep
