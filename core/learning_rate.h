// LearningRate: the learning rate as a function of the update count, as optax computes it:
// a constant (optimizer.learning_rate) or one of optax's schedules (optimizer.schedule:
// cosine_decay, warmup_cosine_decay, exponential_decay, piecewise_constant).
//
// Values are bitwise what optax gives under jit on XLA's CPU backend (jax 0.10, the
// version tools/reference pins): the same float32 operations in the same order, the
// spec's Python floats rounded where optax's weak types round them, the rewrites of XLA's
// algebraic simplifier (a division by a constant becomes a multiplication by its float32
// reciprocal, a power with a constant exponent x^2 = x * x, ...), the FMAs its CPU
// backend contracts a multiply and an add into, libm's cosf and powf (which it calls),
// and denormal results flushed to zero.
// Evaluated on the host; the step copies the value into backend memory each step.
#ifndef LOCKSTEP_CORE_LEARNING_RATE_H_
#define LOCKSTEP_CORE_LEARNING_RATE_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

namespace lockstep {

// Immutable once made: any thread may evaluate it. Its values are optax's arguments, which
// it takes as given: LearningRateFromSpec (core/optimizer_spec.h) checks a spec's (steps in
// [1, 2^31 - 1], finite positive values...) and names the field it rejects.
class LearningRate {
 public:
  // optax.cosine_decay_schedule(init_value, decay_steps, alpha, exponent).
  struct CosineDecay {
    double init_value = 0;
    int64_t decay_steps = 1;
    double alpha = 0;
    double exponent = 1;
  };
  // optax.warmup_cosine_decay_schedule(init_value, peak_value, warmup_steps, decay_steps,
  // end_value, exponent); decay_steps counts the warmup too.
  struct WarmupCosineDecay {
    double init_value = 0, peak_value = 0;
    int64_t warmup_steps = 0, decay_steps = 1;
    double end_value = 0;
    double exponent = 1;
  };
  // optax.exponential_decay(init_value, transition_steps, decay_rate, transition_begin,
  // staircase, end_value).
  struct ExponentialDecay {
    double init_value = 0;
    int64_t transition_steps = 1;
    double decay_rate = 1;
    int64_t transition_begin = 0;
    bool staircase = false;
    std::optional<double> end_value;
  };
  // optax.piecewise_constant_schedule(init_value, boundaries_and_scales).
  struct PiecewiseConstant {
    double init_value = 0;
    std::vector<std::pair<int64_t, double>> boundaries_and_scales;  // any order
  };
  // A constant learning rate, or one of optax's schedules.
  using Schedule =
      std::variant<double, CosineDecay, WarmupCosineDecay, ExponentialDecay, PiecewiseConstant>;

  LearningRate() = default;  // the constant 0
  explicit LearningRate(Schedule schedule);

  // The learning rate of the update made after `count` updates (optax's
  // ScaleByScheduleState.count, which is TrainState.step).
  float operator()(int64_t count) const;

 private:
  Schedule schedule_ = 0.0;  // piecewise_constant's boundaries sorted
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_LEARNING_RATE_H_
