// A small ResNet (named blocks, residual connections with and without a projection,
// BatchNorm, a relu on a branch point, dropout in a block) against Flax under jax.pmap
// (tools/reference/golden_resnet.py): init of params and batch_stats, the loss and every
// gradient on one replica, and 20 steps with sgd and with adam on two replicas (threads
// joined by Gloo over loopback, BatchNorm's statistics all-reduced as pmap's pmean does),
// and as two logical replicas of one executor (exact sums).

#include "core/plan.h"
#include "core/testing.h"
#include "tests/golden.h"
#include "tests/golden_pmap.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

using testing::GoldenLayoutTensors;
using testing::GoldenParams;
using testing::SpecGolden;

absl::StatusOr<SpecGolden> ReadGolden(const std::string& optimizer) {
  return testing::ReadSpecGolden("resnet_pmap2_" + optimizer + ".safetensors");
}

TEST(ResNetGolden, InitMatchesFlaxWithNestedNames) {
  ASSERT_OK_AND_ASSIGN(SpecGolden g, ReadGolden("sgd"));
  const Model& m = g.setup.model;
  ASSERT_EQ(m.layout().entries()[15].name, "ResNetBlock_1/conv_proj/kernel");
  ASSERT_EQ(m.layout().entries()[18].name, "PreAct_0/Conv_0/kernel");
  testing::ExpectInitWithin1e6(g);
  EXPECT_EQ(m.InitStats(), GoldenLayoutTensors(g.st, m.stats_layout(), "init_stats."));
}

TEST(ResNetGolden, LossAndEveryGradientOnOneReplicaWithin1e5) {
  auto backend = NewCpuBackend(DefaultCpuThreads());
  testing::ExpectStatsModelGradientsMatchJax(backend.get(), "resnet_pmap2_sgd.safetensors");
}

// Losses, params, batch_stats and the evaluation of a final state against the file's.
void ExpectMatchesPmap(const SpecGolden& g, const std::vector<float>& losses,
                       const TrainState& state) {
  const Model& m = g.setup.model;
  const std::vector<float> want = *g.st.F32("train.losses");
  ASSERT_EQ(losses.size(), want.size());
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_NEAR(losses[s], want[s], 1e-5 * std::fabs(want[s])) << "step " << s;
  }
  testing::ExpectEveryTensorWithin(m, state.params, GoldenParams(g.st, m, "train.params."), 1e-5);
  testing::ExpectEveryTensorWithin(m.stats_layout(), state.batch_stats,
                                   GoldenLayoutTensors(g.st, m.stats_layout(), "train.stats."),
                                   1e-5);
}

class ResNetPmap : public ::testing::TestWithParam<std::string> {};

TEST_P(ResNetPmap, TwentyStepsOnTwoReplicasMatchPmap) {
  ASSERT_OK_AND_ASSIGN(SpecGolden g, ReadGolden(GetParam()));
  const Dataset data = testing::GoldenDataset(g.st, "data");
  // Buckets overlapping backward, through the blocks.
  std::array<testing::ReplicaRun, 2> runs = testing::RunTwoReplicas(g, data, 1024);
  EXPECT_OK(runs[1].status);
  ASSERT_OK(runs[0].status);
  ASSERT_OK(runs[1].status);
  std::vector<float> losses;
  for (size_t s = 0; s < runs[0].losses.size(); ++s) {
    losses.push_back((runs[0].losses[s] + runs[1].losses[s]) / 2);
  }
  EXPECT_EQ(runs[0].state.params, runs[1].state.params);
  EXPECT_EQ(runs[0].state.batch_stats, runs[1].state.batch_stats);
  ExpectMatchesPmap(g, losses, runs[0].state);
  const float eval_loss = (*g.st.F32("eval.loss"))[0];
  EXPECT_NEAR(runs[0].eval.loss, eval_loss, 1e-5 * std::fabs(eval_loss));
  EXPECT_NEAR(runs[0].eval.accuracy, (*g.st.F32("eval.accuracy"))[0], 1e-6);
}

TEST_P(ResNetPmap, TwoLogicalReplicasOfOneExecutorMatchPmap) {
  ASSERT_OK_AND_ASSIGN(SpecGolden g, ReadGolden(GetParam()));
  const Model& m = g.setup.model;
  const Dataset data = testing::GoldenDataset(g.st, "data");
  const int n = 2, b = static_cast<int>(g.spec.global_batch_size());
  auto backend = NewCpuBackend(1);
  ASSERT_OK_AND_ASSIGN(auto exec, StepExecutor::Create(m, g.setup.optimizer, g.setup.impl, b / n,
                                                       backend.get(), nullptr));
  ASSERT_OK(exec->SetLogicalReplicas(n, 0, n));
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(data));
  TrainingPlan plan(g.spec.seed(), g.spec.dropout_seed(), g.setup.impl, data.size, b, n);
  ASSERT_OK(exec->SetState(
      TrainState::Create(m.Init(plan.init_key(), g.setup.impl), g.setup.optimizer, m.InitStats())));
  std::vector<float> losses;
  for (uint64_t s = 0; s < g.spec.steps(); ++s) {
    const StepPlan p = plan.Next();
    ASSERT_OK_AND_ASSIGN(StepMetrics metrics, exec->StepReplicas(d, p.indices, p.keys));
    losses.push_back(metrics.loss);
  }
  ASSERT_OK_AND_ASSIGN(TrainState state, exec->GetState());
  ExpectMatchesPmap(g, losses, state);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ResNetPmap, ::testing::Values("sgd", "adam"));

}  // namespace
}  // namespace lockstep
