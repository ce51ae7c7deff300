// The step without the spec, the datasets or the files: models built in C++, optimizers
// and schedules given as plain options, steps on the CPU backend. This binary links
// lockstep_cpu (and through it lockstep_step) only, so it stops building if the step or
// the kernels need protobuf, the data library or the job's files again; the configure
// checks their link closure besides (cmake/LinkClosure.cmake).
#include <cstring>
#include <vector>

#include "core/data/random_dataset.h"
#include "core/learning_rate.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/plan.h"
#include "core/step.h"
#include "core/testing.h"
#include "core/train_state.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

constexpr int kBatch = 32;
constexpr rng::Impl kImpl = rng::Impl::kPartitionable;

struct Trained {
  std::vector<float> losses;               // each step's
  std::vector<std::vector<float>> params;  // after each step
};

// `steps` steps of `model` with `optimizer` on the same batch of a random dataset.
Trained Train(const Model& model, const Optimizer& optimizer, int steps) {
  auto backend = NewCpuBackend(1);
  const Dataset data = RandomDataset(kBatch, 7);
  TrainingPlan plan(0, 1, kImpl, data.size, kBatch, 1);
  Trained run;
  auto exec = StepExecutor::Create(model, optimizer, kImpl, kBatch, backend.get(), nullptr);
  EXPECT_TRUE(exec.ok()) << exec.status();
  if (!exec.ok()) return run;
  auto device_data = (*exec)->Upload(data);
  EXPECT_TRUE(device_data.ok()) << device_data.status();
  EXPECT_TRUE(
      (*exec)->SetState(TrainState::Create(model.Init(plan.init_key(), kImpl), optimizer)).ok());
  const StepPlan p = plan.Next();  // one batch, stepped on again and again
  for (int s = 0; s < steps; ++s) {
    auto m = (*exec)->Step(*device_data, p.indices, p.keys[0]);
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return run;
    run.losses.push_back(m->loss);
    auto state = (*exec)->GetState();
    EXPECT_TRUE(state.ok()) << state.status();
    if (!state.ok()) return run;
    run.params.push_back(state->params);
  }
  return run;
}

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(StepOnly, AdamOnAModelBuiltInCppLearnsABatch) {
  Model model({28, 28, 1});
  model.Flatten();
  model.Dense(32);
  model.Relu();
  model.Dense(10);
  Optimizer::Options options;
  options.kind = Optimizer::Kind::kAdam;
  options.learning_rate = LearningRate(1e-2);
  const Optimizer adam(options);
  ASSERT_EQ(adam.slots(), (std::vector<std::string>{"mu", "nu"}));

  const Trained run = Train(model, adam, 20);
  ASSERT_EQ(run.losses.size(), 20u);
  // 32 examples of random labels, memorized: the loss falls well below ln(10) = 2.30.
  EXPECT_LT(run.losses.back(), 0.5f * run.losses.front()) << run.losses.front();
  const Trained again = Train(model, adam, 20);
  ASSERT_EQ(again.params.size(), 20u);
  EXPECT_TRUE(Bitwise(run.params.back(), again.params.back())) << "run to run";
}

TEST(StepOnly, TheStepAppliesTheScheduleItIsGiven) {
  // cosine_decay over one step with alpha 0: the first update at init_value, every later
  // one at exactly 0, so plain sgd leaves the params as the first step made them.
  Optimizer::Options options;
  options.learning_rate = LearningRate(LearningRate::CosineDecay{0.1, 1, 0.0, 1.0});
  const Optimizer sgd(options);
  EXPECT_EQ(sgd.learning_rate()(0), 0.1f);
  EXPECT_EQ(sgd.learning_rate()(1), 0.0f);
  EXPECT_TRUE(sgd.slots().empty());

  const Model mlp = Model::Mlp({16}, 0.0);
  const Trained run = Train(mlp, sgd, 3);
  ASSERT_EQ(run.params.size(), 3u);
  const std::vector<float> init =
      mlp.Init(TrainingPlan(0, 1, kImpl, kBatch, kBatch, 1).init_key(), kImpl);
  EXPECT_FALSE(Bitwise(run.params[0], init)) << "the first update moved nothing";
  EXPECT_TRUE(Bitwise(run.params[1], run.params[0]));
  EXPECT_TRUE(Bitwise(run.params[2], run.params[0]));
}

}  // namespace
}  // namespace lockstep
