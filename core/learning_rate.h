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
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

// Immutable once made: any thread may evaluate it.
class LearningRate {
 public:
  // From optimizer.learning_rate or optimizer.schedule (exactly one of them).
  // INVALID_ARGUMENT naming the field: "optimizer.schedule.cosine_decay.decay_steps: 0 is
  // not > 0".
  static absl::StatusOr<LearningRate> FromSpec(const v1::OptimizerSpec& spec);

  // The learning rate of the update made after `count` updates (optax's
  // ScaleByScheduleState.count, which is TrainState.step).
  float operator()(int64_t count) const;

 private:
  v1::LearningRateSchedule spec_;  // empty: the constant
  double constant_ = 0;
  std::vector<std::pair<int64_t, double>> boundaries_;  // piecewise_constant's, sorted
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_LEARNING_RATE_H_
