// BatchNorm against Flax's nn.BatchNorm(axis_name='batch') (tools/reference/
// golden_batchnorm.py): init of params and batch_stats, the loss and every gradient on
// one replica, and 20 steps on two replicas in this process (threads joined by Gloo over
// loopback), whose statistics are all-reduced as pmap's pmean does: params and
// batch_stats against the pmap run's, and the evaluation with the running averages; and
// the batch_stats as state (bytes, checksum, a bitwise restore).
#include <algorithm>

#include "core/io/safetensors.h"
#include "core/plan.h"
#include "core/testing.h"
#include "tests/golden.h"
#include "tests/golden_pmap.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

using testing::GoldenParams;

constexpr char kFile[] = "batchnorm_pmap2.safetensors";

using Golden = testing::SpecGolden;

absl::StatusOr<Golden> ReadGolden() { return testing::ReadSpecGolden(kFile); }

// The file's tensors prefix + name for each entry of `layout` ("BatchNorm_0/mean").
std::vector<float> GoldenTensors(const SafeTensors& st, const ParamLayout& layout,
                                 const std::string& prefix) {
  std::vector<float> flat(layout.total());
  for (const ParamEntry& e : layout.entries()) {
    auto v = st.F32(prefix + e.name);
    EXPECT_TRUE(v.ok() && v->size() == e.size) << prefix << e.name;
    if (v.ok() && v->size() == e.size) std::copy(v->begin(), v->end(), flat.begin() + e.offset);
  }
  return flat;
}

// The params whose gradient is zero but for rounding: the biases of layers right before
// a BatchNorm, which subtracts any constant shift (JAX's gradients are ~1e-7 noise there).
std::vector<std::string> ShiftedAway(const Model& m) {
  std::vector<std::string> names;
  for (size_t i = 0; i + 1 < m.layers().size(); ++i) {
    const Layer& l = m.layers()[i];
    if (l.bias >= 0 && m.layers()[i + 1].kind == LayerKind::kBatchNorm) {
      names.push_back(m.layout().entries()[l.bias].name);
    }
  }
  return names;
}

// Every tensor of `layout` within `tolerance` (relative L2), but those named in `noise`:
// within `noise_abs` absolute (their values are rounding noise).
void ExpectWithin(const ParamLayout& layout, const std::vector<float>& got,
                  const std::vector<float>& want, double tolerance,
                  const std::vector<std::string>& noise = {}, double noise_abs = 1e-6) {
  for (const ParamEntry& e : layout.entries()) {
    const std::span<const float> a(got.data() + e.offset, e.size),
        b(want.data() + e.offset, e.size);
    if (std::find(noise.begin(), noise.end(), e.name) != noise.end()) {
      EXPECT_LE(testing::MaxAbsDiff(a, b), noise_abs) << e.name;
    } else {
      EXPECT_LE(testing::RelativeL2(a, b), tolerance) << e.name;
    }
  }
}

TEST(BatchNormGolden, InitMatchesFlax) {
  ASSERT_OK_AND_ASSIGN(Golden g, ReadGolden());
  const Model& m = g.setup.model;
  ASSERT_EQ(m.stats_layout().entries().size(), 4u);
  testing::ExpectInitWithin1e6(g);
  EXPECT_EQ(m.InitStats(), GoldenTensors(g.st, m.stats_layout(), "init_stats."));
}

TEST(BatchNormGolden, LossAndEveryGradientOnOneReplicaWithin1e5) {
  ASSERT_OK_AND_ASSIGN(Golden g, ReadGolden());
  const Model& m = g.setup.model;
  const int b = static_cast<int>(g.spec.global_batch_size());
  auto backend = NewCpuBackend(DefaultCpuThreads());
  ASSERT_OK_AND_ASSIGN(auto exec, StepExecutor::Create(m, g.setup.optimizer, g.setup.impl, b,
                                                       backend.get(), nullptr));
  const Dataset data = testing::GoldenDataset(g.st, "data");
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(data));
  ASSERT_OK(exec->SetState(
      TrainState::Create(GoldenParams(g.st, m, "init."), g.setup.optimizer, m.InitStats())));
  std::vector<int32_t> idx(b);
  std::iota(idx.begin(), idx.end(), 0);
  ASSERT_OK_AND_ASSIGN(StepMetrics metrics, exec->ComputeGradients(d, idx, {}));
  const float want_loss = (*g.st.F32("grads.loss"))[0];
  EXPECT_NEAR(metrics.loss, want_loss, 1e-5 * std::fabs(want_loss));
  ASSERT_OK_AND_ASSIGN(std::vector<float> grads, exec->Gradients());
  const std::vector<std::string> noise = ShiftedAway(m);
  EXPECT_EQ(noise, (std::vector<std::string>{"Conv_0/bias", "Dense_0/bias"}));
  ExpectWithin(m.layout(), grads, GoldenParams(g.st, m, "grads."), 1e-5, noise);
  // Gradients alone leave the running averages as they were.
  ASSERT_OK_AND_ASSIGN(TrainState state, exec->GetState());
  EXPECT_EQ(state.batch_stats, m.InitStats());
}

TEST(BatchNormGolden, TwentyStepsOnTwoReplicasMatchPmap) {
  ASSERT_OK_AND_ASSIGN(Golden g, ReadGolden());
  const Model& m = g.setup.model;
  const Dataset data = testing::GoldenDataset(g.st, "data");
  std::array<testing::ReplicaRun, 2> runs = testing::RunTwoReplicas(g, data);
  // Both ranks' errors: the first to fail closes its connections, so the other's error
  // is only the echo.
  EXPECT_OK(runs[1].status);
  ASSERT_OK(runs[0].status);
  ASSERT_OK(runs[1].status);
  const std::vector<float> losses = *g.st.F32("train.losses");
  ASSERT_EQ(runs[0].losses.size(), losses.size());
  for (size_t s = 0; s < losses.size(); ++s) {
    const float mean = (runs[0].losses[s] + runs[1].losses[s]) / 2;
    EXPECT_NEAR(mean, losses[s], 1e-5 * std::fabs(losses[s])) << "step " << s;
  }
  // The replicas agree bit for bit, running averages included.
  EXPECT_EQ(runs[0].state.params, runs[1].state.params);
  EXPECT_EQ(runs[0].state.batch_stats, runs[1].state.batch_stats);
  // The shifted-away biases: 20 steps of momentum accumulate their noise (1.02e-6 seen
  // with dropout), held to the 1e-5, absolute.
  ExpectWithin(m.layout(), runs[0].state.params, GoldenParams(g.st, m, "train.params."), 1e-5,
               ShiftedAway(m), 1e-5);
  ExpectWithin(m.stats_layout(), runs[0].state.batch_stats,
               GoldenTensors(g.st, m.stats_layout(), "train.stats."), 1e-5);
  // Evaluation normalizes with the running averages.
  const float eval_loss = (*g.st.F32("eval.loss"))[0];
  EXPECT_NEAR(runs[0].eval.loss, eval_loss, 1e-5 * std::fabs(eval_loss));
  EXPECT_NEAR(runs[0].eval.accuracy, (*g.st.F32("eval.accuracy"))[0], 1e-6);
  EXPECT_EQ(runs[0].eval.count, data.size);
}

// The running averages are state: in the state bytes (after the slots), in the checksum,
// and restored by SetState so that a resumed replica continues bit for bit.
TEST(BatchNormGolden, BatchStatsAreStateThatRestoresBitwise) {
  ASSERT_OK_AND_ASSIGN(Golden g, ReadGolden());
  const Model& m = g.setup.model;
  const int b = static_cast<int>(g.spec.global_batch_size());
  const Dataset data = testing::GoldenDataset(g.st, "data");
  auto backend = NewCpuBackend(2);
  auto make = [&]() {
    return StepExecutor::Create(m, g.setup.optimizer, g.setup.impl, b, backend.get(), nullptr);
  };
  ASSERT_OK_AND_ASSIGN(auto first, make());
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, first->Upload(data));
  ASSERT_OK(first->SetState(
      TrainState::Create(m.Init(TrainingPlan::InitKey(3, g.setup.impl), g.setup.impl),
                         g.setup.optimizer, m.InitStats())));
  TrainingPlan plan(3, 5, g.setup.impl, data.size, b, 1);
  for (int s = 0; s < 2; ++s) {
    const StepPlan p = plan.Next();
    ASSERT_OK(first->Step(d, p.indices, p.keys[0]).status());
  }
  ASSERT_OK_AND_ASSIGN(TrainState mid, first->GetState());
  EXPECT_NE(mid.batch_stats, m.InitStats());
  EXPECT_EQ(first->state_bytes(), StateBytes(mid).size());
  // The last bytes of the state are the batch_stats.
  std::vector<float> tail_stats(mid.batch_stats.size());
  ASSERT_OK(first->ReadState(
      first->state_bytes() - tail_stats.size() * sizeof(float),
      {reinterpret_cast<char*>(tail_stats.data()), tail_stats.size() * sizeof(float)}));
  EXPECT_EQ(tail_stats, mid.batch_stats);
  ASSERT_OK_AND_ASSIGN(uint64_t sum, first->ParamChecksum());
  EXPECT_EQ(sum, ParamChecksum(mid.params, mid.batch_stats));
  EXPECT_NE(sum, ParamChecksum(mid.params));
  // A second executor restored from `mid` continues as the first does.
  ASSERT_OK_AND_ASSIGN(auto second, make());
  ASSERT_OK_AND_ASSIGN(DeviceDataset d2, second->Upload(data));
  TrainState wrong = mid;
  wrong.batch_stats.pop_back();
  EXPECT_THAT(second->SetState(wrong), testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                         ::testing::HasSubstr("batch_stats")));
  ASSERT_OK(second->SetState(mid));
  for (int s = 0; s < 2; ++s) {
    const StepPlan p = plan.Next();
    ASSERT_OK(first->Step(d, p.indices, p.keys[0]).status());
    ASSERT_OK(second->Step(d2, p.indices, p.keys[0]).status());
  }
  ASSERT_OK_AND_ASSIGN(TrainState a, first->GetState());
  ASSERT_OK_AND_ASSIGN(TrainState c, second->GetState());
  EXPECT_EQ(a.params, c.params);
  EXPECT_EQ(a.batch_stats, c.batch_stats);
  EXPECT_NE(a.batch_stats, mid.batch_stats);
}

}  // namespace
}  // namespace lockstep
