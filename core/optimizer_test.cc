// The optimizer's spec: schedules, Nesterov and clipping, parsed from YAML and validated
// (each error names its field); schedule values at the points optax's formulas fix. The
// values over whole ranges are checked bitwise against optax in tests/golden_optax_test.
#include "core/optimizer.h"

#include "core/optimizer_spec.h"
#include "core/spec/spec.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

absl::StatusOr<v1::OptimizerSpec> ParseOptimizer(const std::string& yaml) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, ParseSpec("optimizer: " + yaml, "spec.yaml"));
  return spec.optimizer();
}

absl::StatusOr<Optimizer> FromYaml(const std::string& yaml) {
  ASSIGN_OR_RETURN(v1::OptimizerSpec spec, ParseOptimizer(yaml));
  return OptimizerFromSpec(spec);
}

TEST(LearningRate, ConstantLearningRate) {
  ASSERT_OK_AND_ASSIGN(Optimizer o, FromYaml("{kind: sgd, learning_rate: 0.1}"));
  EXPECT_EQ(o.learning_rate()(0), 0.1f);
  EXPECT_EQ(o.learning_rate()(123456), 0.1f);
  EXPECT_EQ(o.Scalars(7).lr, 0.1f);
}

TEST(LearningRate, CosineDecayEndsAtAlphaTimesInit) {
  ASSERT_OK_AND_ASSIGN(
      Optimizer o,
      FromYaml("{kind: sgd, schedule: {cosine_decay: {init_value: 0.1, decay_steps: 100, "
               "alpha: 0.5}}}"));
  EXPECT_EQ(o.learning_rate()(0), 0.1f);
  EXPECT_FLOAT_EQ(o.learning_rate()(50), 0.075f);
  EXPECT_FLOAT_EQ(o.learning_rate()(100), 0.05f);
  EXPECT_EQ(o.learning_rate()(100), o.learning_rate()(1000));  // held after decay_steps
  EXPECT_EQ(o.Scalars(50).lr, o.learning_rate()(50));
}

TEST(LearningRate, WarmupCosineDecayRisesLinearlyThenDecays) {
  ASSERT_OK_AND_ASSIGN(
      Optimizer o,
      FromYaml("{kind: adam, schedule: {warmup_cosine_decay: {init_value: 0, peak_value: 1, "
               "warmup_steps: 10, decay_steps: 110, end_value: 0.1}}}"));
  EXPECT_EQ(o.learning_rate()(0), 0.0f);
  EXPECT_FLOAT_EQ(o.learning_rate()(5), 0.5f);
  EXPECT_EQ(o.learning_rate()(10), 1.0f);
  EXPECT_FLOAT_EQ(o.learning_rate()(60), 0.55f);
  EXPECT_FLOAT_EQ(o.learning_rate()(110), 0.1f);
  EXPECT_FLOAT_EQ(o.learning_rate()(5000), 0.1f);
}

TEST(LearningRate, ExponentialDecayStaircaseBeginAndEnd) {
  ASSERT_OK_AND_ASSIGN(
      Optimizer o,
      FromYaml("{kind: sgd, schedule: {exponential_decay: {init_value: 1, transition_steps: 10, "
               "decay_rate: 0.5, transition_begin: 5, staircase: true, end_value: 0.2}}}"));
  EXPECT_EQ(o.learning_rate()(0), 1.0f);
  EXPECT_EQ(o.learning_rate()(14), 1.0f);
  EXPECT_EQ(o.learning_rate()(15), 0.5f);
  EXPECT_EQ(o.learning_rate()(25), 0.25f);
  EXPECT_EQ(o.learning_rate()(35), 0.2f);  // floored at end_value
}

TEST(LearningRate, PiecewiseConstantScalesFromEachBoundaryOn) {
  // Keys in any order, as a YAML mapping (optax's dict).
  ASSERT_OK_AND_ASSIGN(Optimizer o,
                       FromYaml("{kind: sgd, schedule: {piecewise_constant: {init_value: 1.0, "
                                "boundaries_and_scales: {20: 0.5, 10: 0.1}}}}"));
  EXPECT_EQ(o.learning_rate()(9), 1.0f);
  EXPECT_EQ(o.learning_rate()(10), 0.1f);
  EXPECT_EQ(o.learning_rate()(20), 0.5f * 0.1f);
}

TEST(Optimizer, ScratchOnlyWhenClipping) {
  ASSERT_OK_AND_ASSIGN(Optimizer plain, FromYaml("{kind: sgd, learning_rate: 0.1}"));
  EXPECT_EQ(plain.ScratchBytes(1 << 20), 0u);
  ASSERT_OK_AND_ASSIGN(Optimizer clip,
                       FromYaml("{kind: adam, learning_rate: 0.1, clip_by_global_norm: 1}"));
  EXPECT_EQ(clip.clip_norm(), 1.0);
  // 2^20 values: 256 chunk sums, then the result.
  EXPECT_EQ(clip.ScratchBytes(1 << 20), 257 * sizeof(double));
  EXPECT_EQ(SumSquaresPartials(kSumChunk), 0u);
  // kSumChunk^2 + 1 values: 4097 chunk sums, then 2 sums of those, then the result.
  EXPECT_EQ(SumSquaresPartials(size_t{kSumChunk} * kSumChunk + 1), kSumChunk + 3u);
}

TEST(Optimizer, NesterovKeepsTheTraceSlot) {
  ASSERT_OK_AND_ASSIGN(Optimizer o,
                       FromYaml("{kind: sgd, learning_rate: 0.1, momentum: 0.9, nesterov: true}"));
  EXPECT_EQ(o.slots(), std::vector<std::string>{"trace"});
}

struct BadOptimizer {
  const char* yaml;
  const char* message;
};

class OptimizerInvalid : public ::testing::TestWithParam<BadOptimizer> {};

TEST_P(OptimizerInvalid, NamesTheField) {
  auto spec = ParseOptimizer(GetParam().yaml);
  ASSERT_OK(spec);
  EXPECT_THAT(OptimizerFromSpec(*spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, OptimizerInvalid,
    ::testing::Values(
        BadOptimizer{"{kind: sgd}", "optimizer.learning_rate: must be positive"},
        BadOptimizer{"{kind: sgd, learning_rate: 0.1, schedule: {cosine_decay: "
                     "{init_value: 0.1, decay_steps: 10}}}",
                     "optimizer.learning_rate, optimizer.schedule: set one of them"},
        BadOptimizer{"{kind: sgd, schedule: {}}", "optimizer.schedule: name one schedule"},
        BadOptimizer{"{kind: sgd, schedule: {cosine_decay: {init_value: 0.1}}}",
                     "optimizer.schedule.cosine_decay.decay_steps: 0 is not > 0"},
        BadOptimizer{"{kind: sgd, schedule: {cosine_decay: {decay_steps: 5}}}",
                     "optimizer.schedule.cosine_decay.init_value: 0 is not > 0"},
        BadOptimizer{"{kind: sgd, schedule: {cosine_decay: {init_value: 0.1, decay_steps: 5, "
                     "alpha: 1.5}}}",
                     "optimizer.schedule.cosine_decay.alpha: 1.5 is not <= 1"},
        BadOptimizer{"{kind: sgd, schedule: {cosine_decay: {init_value: 0.1, decay_steps: 5, "
                     "exponent: 0}}}",
                     "optimizer.schedule.cosine_decay.exponent: 0 is not > 0"},
        BadOptimizer{"{kind: sgd, schedule: {cosine_decay: {init_value: \"NaN\", "
                     "decay_steps: 5}}}",
                     "optimizer.schedule.cosine_decay.init_value: nan is not a finite number"},
        BadOptimizer{"{kind: sgd, schedule: {cosine_decay: {init_value: 0.1, "
                     "decay_steps: 3000000000}}}",
                     "optimizer.schedule.cosine_decay.decay_steps: 3000000000 is not <= "
                     "2147483647"},
        BadOptimizer{"{kind: adam, schedule: {warmup_cosine_decay: {peak_value: 0.1, "
                     "warmup_steps: 100, decay_steps: 100}}}",
                     "optimizer.schedule.warmup_cosine_decay.decay_steps: 100 is not > "
                     "warmup_steps (100)"},
        BadOptimizer{"{kind: adam, schedule: {warmup_cosine_decay: {peak_value: 0.1, "
                     "warmup_steps: -1, decay_steps: 100}}}",
                     "optimizer.schedule.warmup_cosine_decay.warmup_steps: -1 is not >= 0"},
        BadOptimizer{"{kind: adam, schedule: {warmup_cosine_decay: {init_value: 0.1, "
                     "warmup_steps: 1, decay_steps: 100}}}",
                     "optimizer.schedule.warmup_cosine_decay.peak_value: 0 is not > 0"},
        BadOptimizer{"{kind: adam, schedule: {warmup_cosine_decay: {peak_value: 0.1, "
                     "decay_steps: 100, end_value: -1}}}",
                     "optimizer.schedule.warmup_cosine_decay.end_value: -1 is not >= 0"},
        BadOptimizer{"{kind: sgd, schedule: {exponential_decay: {init_value: 0.1, "
                     "decay_rate: 0.5}}}",
                     "optimizer.schedule.exponential_decay.transition_steps: 0 is not > 0"},
        BadOptimizer{"{kind: sgd, schedule: {exponential_decay: {init_value: 0.1, "
                     "transition_steps: 10}}}",
                     "optimizer.schedule.exponential_decay.decay_rate: 0 is not > 0"},
        BadOptimizer{"{kind: sgd, schedule: {exponential_decay: {init_value: 0.1, "
                     "transition_steps: 10, decay_rate: 0.5, transition_begin: -3}}}",
                     "optimizer.schedule.exponential_decay.transition_begin: -3 is not >= 0"},
        BadOptimizer{"{kind: sgd, schedule: {piecewise_constant: {init_value: 0.1, "
                     "boundaries_and_scales: {10: -0.5}}}}",
                     "optimizer.schedule.piecewise_constant.boundaries_and_scales[10]: the "
                     "scale -0.5"},
        BadOptimizer{"{kind: sgd, schedule: {piecewise_constant: {init_value: 0.1, "
                     "boundaries_and_scales: {-10: 0.5}}}}",
                     "optimizer.schedule.piecewise_constant.boundaries_and_scales[-10]: the "
                     "step -10"},
        BadOptimizer{"{kind: sgd, learning_rate: 0.1, nesterov: true}",
                     "optimizer.nesterov: needs momentum > 0"},
        BadOptimizer{"{kind: adam, learning_rate: 0.1, nesterov: true}",
                     "optimizer.nesterov: applies to sgd only"},
        BadOptimizer{"{kind: sgd, learning_rate: 0.1, clip_by_global_norm: -1}",
                     "optimizer.clip_by_global_norm: -1 is not a finite number >= 0"}));

TEST(OptimizerSpec, TwoSchedulesAtOnceAreAParseError) {
  EXPECT_THAT(ParseOptimizer("{kind: sgd, schedule: {cosine_decay: {init_value: 0.1, "
                             "decay_steps: 5}, exponential_decay: {init_value: 0.1}}}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec.yaml")));
}

TEST(OptimizerSpec, UnknownScheduleFieldsAreNamedWithTheirPath) {
  EXPECT_THAT(ParseOptimizer("{kind: sgd, schedule: {cosine_decay: {init: 0.1}}}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("optimizer.schedule.cosine_decay.init: unknown field")));
  EXPECT_THAT(ParseOptimizer("{kind: sgd, schedule: {linear: {}}}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("optimizer.schedule.linear: unknown field")));
}

}  // namespace
}  // namespace lockstep
