// LearningRate: the learning rate as a function of the update count, as optax computes it.
// Contract: learning_rate.h.
#include "core/learning_rate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <variant>

namespace lockstep {
namespace {

// optax counts in int32 and saturates there.
constexpr int64_t kMaxCount = std::numeric_limits<int32_t>::max();
// jnp.pi, a Python float, meets a float32 array: float32(pi).
constexpr float kPi = static_cast<float>(3.14159265358979323846);

// XLA's CPU backend flushes denormal results to zero.
float FlushDenormal(float v) {
  return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
}

// x ** y for a constant y, as XLA computes it under jit: its algebraic simplifier
// rewrites y = 0, 1, 2, 3 and -1 into products, its CPU backend y = 0.5 into a square
// root, and calls powf for the rest.
float PowConstant(float x, float y) {
  if (y == 0.0f) return 1.0f;
  if (y == 1.0f) return x;
  if (y == 2.0f) return x * x;
  if (y == 3.0f) return x * x * x;
  if (y == -1.0f) return 1.0f / x;
  if (y == 0.5f) return std::sqrt(x);
  return FlushDenormal(std::pow(x, y));
}

// x / d for a constant d, as XLA's algebraic simplifier rewrites it: x * float32(1 / d).
float DivideByConstant(float x, float d) { return x * (1.0f / d); }

// optax.cosine_decay_schedule(init_value, decay_steps, alpha, exponent)(count). XLA folds
// pi * t / decay_steps into t * (pi * (1 / decay_steps)) and fuses (1 - alpha) * x +
// alpha into one FMA; its other rewrites here (the 0.5 and the powers of it that x^2 and
// x^3 bring, folded into the constants beside them) scale by powers of two, which
// changes no bits.
float CosineDecay(double init_value, int64_t decay_steps, double alpha, double exponent,
                  int64_t count) {
  const float steps = static_cast<float>(static_cast<double>(decay_steps));
  const float t = std::min(static_cast<float>(count), steps);
  const float cosine = 0.5f * (1.0f + std::cos(t * (kPi * (1.0f / steps))));
  const float decayed =
      std::fma(static_cast<float>(1.0 - alpha), PowConstant(cosine, static_cast<float>(exponent)),
               static_cast<float>(alpha));
  return static_cast<float>(init_value) * decayed;
}

float Evaluate(double constant, int64_t) { return static_cast<float>(constant); }

float Evaluate(const LearningRate::CosineDecay& s, int64_t count) {
  return FlushDenormal(CosineDecay(s.init_value, s.decay_steps, s.alpha, s.exponent, count));
}

// optax.warmup_cosine_decay_schedule: join_schedules of a linear_schedule (optax's
// polynomial_schedule with power 1) and a cosine decay. The linear part's
// (init - peak) * (1 - t / warmup) + peak is two FMAs on XLA's CPU backend.
float Evaluate(const LearningRate::WarmupCosineDecay& s, int64_t count) {
  const int64_t warmup = s.warmup_steps;
  if (count < warmup) {
    const int64_t t = std::clamp<int64_t>(count, 0, warmup);
    const float frac = std::fma(-static_cast<float>(t), 1.0f / static_cast<float>(warmup), 1.0f);
    return FlushDenormal(std::fma(static_cast<float>(s.init_value - s.peak_value), frac,
                                  static_cast<float>(s.peak_value)));
  }
  const double alpha = s.peak_value == 0.0 ? 0.0 : s.end_value / s.peak_value;
  return FlushDenormal(
      CosineDecay(s.peak_value, s.decay_steps - warmup, alpha, s.exponent, count - warmup));
}

// optax.exponential_decay.
float Evaluate(const LearningRate::ExponentialDecay& s, int64_t count) {
  const int64_t decreased = count - s.transition_begin;
  float p = DivideByConstant(static_cast<float>(decreased), static_cast<float>(s.transition_steps));
  if (s.staircase) p = std::floor(p);
  const float init = static_cast<float>(s.init_value);
  float v =
      decreased <= 0 ? init : init * FlushDenormal(std::pow(static_cast<float>(s.decay_rate), p));
  if (s.end_value) {
    const float end = static_cast<float>(*s.end_value);
    v = s.decay_rate < 1.0 ? std::max(v, end) : std::min(v, end);
  }
  return FlushDenormal(v);
}

// optax: v = v * indicator + (1 - indicator) * scale * v per boundary in order, with
// indicator 0 from the boundary on: v becomes float32(scale) * v there.
float Evaluate(const LearningRate::PiecewiseConstant& s, int64_t count) {
  float v = static_cast<float>(s.init_value);
  for (const auto& [boundary, scale] : s.boundaries_and_scales) {
    if (count >= boundary) v = FlushDenormal(static_cast<float>(scale) * v);
  }
  return v;
}

}  // namespace

LearningRate::LearningRate(Schedule schedule) : schedule_(std::move(schedule)) {
  if (auto* p = std::get_if<PiecewiseConstant>(&schedule_)) {
    std::sort(p->boundaries_and_scales.begin(), p->boundaries_and_scales.end());
  }
}

float LearningRate::operator()(int64_t count) const {
  count = std::clamp<int64_t>(count, 0, kMaxCount);
  return std::visit([count](const auto& s) { return Evaluate(s, count); }, schedule_);
}

}  // namespace lockstep
