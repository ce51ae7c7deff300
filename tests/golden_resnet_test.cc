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

class ResNetPmap : public ::testing::TestWithParam<std::string> {};

TEST_P(ResNetPmap, TwentyStepsOnTwoReplicasMatchPmap) {
  ASSERT_OK_AND_ASSIGN(SpecGolden g, ReadGolden(GetParam()));
  // Buckets overlapping backward, through the blocks.
  testing::ExpectTwoReplicasMatchPmap(g, testing::GoldenDataset(g.st, "data"), 1024);
}

TEST_P(ResNetPmap, TwoLogicalReplicasOfOneExecutorMatchPmap) {
  ASSERT_OK_AND_ASSIGN(SpecGolden g, ReadGolden(GetParam()));
  testing::ExpectTwoLogicalReplicasMatchPmap(g, testing::GoldenDataset(g.st, "data"));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ResNetPmap, ::testing::Values("sgd", "adam"));

}  // namespace
}  // namespace lockstep
