// LearningRate: the learning rate as a function of the update count, as optax computes it.
// Contract: learning_rate.h.
#include "core/learning_rate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

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

float CosineDecay(const v1::CosineDecaySchedule& s, int64_t count) {
  return CosineDecay(s.init_value(), s.decay_steps(), s.alpha(),
                     s.has_exponent() ? s.exponent() : 1.0, count);
}

// optax.warmup_cosine_decay_schedule: join_schedules of a linear_schedule (optax's
// polynomial_schedule with power 1) and a cosine decay. The linear part's
// (init - peak) * (1 - t / warmup) + peak is two FMAs on XLA's CPU backend.
float WarmupCosineDecay(const v1::WarmupCosineDecaySchedule& s, int64_t count) {
  const int64_t warmup = s.warmup_steps();
  if (count < warmup) {
    const int64_t t = std::clamp<int64_t>(count, 0, warmup);
    const float frac = std::fma(-static_cast<float>(t), 1.0f / static_cast<float>(warmup), 1.0f);
    return std::fma(static_cast<float>(s.init_value() - s.peak_value()), frac,
                    static_cast<float>(s.peak_value()));
  }
  const double alpha = s.peak_value() == 0.0 ? 0.0 : s.end_value() / s.peak_value();
  return CosineDecay(s.peak_value(), s.decay_steps() - warmup, alpha,
                     s.has_exponent() ? s.exponent() : 1.0, count - warmup);
}

// optax.exponential_decay.
float ExponentialDecay(const v1::ExponentialDecaySchedule& s, int64_t count) {
  const int64_t decreased = count - s.transition_begin();
  float p =
      DivideByConstant(static_cast<float>(decreased), static_cast<float>(s.transition_steps()));
  if (s.staircase()) p = std::floor(p);
  const float init = static_cast<float>(s.init_value());
  float v =
      decreased <= 0 ? init : init * FlushDenormal(std::pow(static_cast<float>(s.decay_rate()), p));
  if (s.has_end_value()) {
    const float end = static_cast<float>(s.end_value());
    v = s.decay_rate() < 1.0 ? std::max(v, end) : std::min(v, end);
  }
  return v;
}

// Checks of one schedule's fields, each error naming "<prefix><field>".
class Checker {
 public:
  explicit Checker(std::string prefix) : prefix_(std::move(prefix)) {}

  // A finite value in [lo, hi] (`lo_open`: in (lo, hi]).
  absl::Status Value(const char* field, double v, double lo, bool lo_open,
                     double hi = std::numeric_limits<double>::infinity()) const {
    if (!std::isfinite(v)) return Error(field, absl::StrCat(v, " is not a finite number"));
    if (lo_open ? !(v > lo) : !(v >= lo)) {
      return Error(field, absl::StrCat(v, " is not ", lo_open ? "> " : ">= ", lo));
    }
    if (v > hi) return Error(field, absl::StrCat(v, " is not <= ", hi));
    return absl::OkStatus();
  }
  absl::Status Positive(const char* field, double v) const { return Value(field, v, 0, true); }
  absl::Status NonNegative(const char* field, double v) const { return Value(field, v, 0, false); }
  // A step count in [lo, 2^31 - 1] (optax's counts are int32).
  absl::Status Steps(const char* field, int64_t v, int64_t lo) const {
    if (v < lo) return Error(field, absl::StrCat(v, " is not ", lo == 1 ? "> 0" : ">= 0"));
    if (v > kMaxCount) {
      return Error(field, absl::StrCat(v, " is not <= ", kMaxCount, " (optax counts in int32)"));
    }
    return absl::OkStatus();
  }
  absl::Status Error(const std::string& field, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(prefix_, field, ": ", what));
  }

 private:
  std::string prefix_;
};

absl::Status CheckExponent(const Checker& c, bool has, double exponent) {
  return has ? c.Positive("exponent", exponent) : absl::OkStatus();
}

absl::Status CheckSchedule(const v1::LearningRateSchedule& spec) {
  const std::string base = "optimizer.schedule.";
  switch (spec.kind_case()) {
    case v1::LearningRateSchedule::kCosineDecay: {
      const auto& s = spec.cosine_decay();
      const Checker c(base + "cosine_decay.");
      RETURN_IF_ERROR(c.Positive("init_value", s.init_value()));
      RETURN_IF_ERROR(c.Steps("decay_steps", s.decay_steps(), 1));
      RETURN_IF_ERROR(c.Value("alpha", s.alpha(), 0, false, 1));
      return CheckExponent(c, s.has_exponent(), s.exponent());
    }
    case v1::LearningRateSchedule::kWarmupCosineDecay: {
      const auto& s = spec.warmup_cosine_decay();
      const Checker c(base + "warmup_cosine_decay.");
      RETURN_IF_ERROR(c.NonNegative("init_value", s.init_value()));
      RETURN_IF_ERROR(c.Positive("peak_value", s.peak_value()));
      RETURN_IF_ERROR(c.Steps("warmup_steps", s.warmup_steps(), 0));
      RETURN_IF_ERROR(c.Steps("decay_steps", s.decay_steps(), 1));
      if (s.decay_steps() <= s.warmup_steps()) {
        return c.Error("decay_steps",
                       absl::StrCat(s.decay_steps(), " is not > warmup_steps (", s.warmup_steps(),
                                    "): decay_steps counts the warmup too"));
      }
      RETURN_IF_ERROR(c.NonNegative("end_value", s.end_value()));
      return CheckExponent(c, s.has_exponent(), s.exponent());
    }
    case v1::LearningRateSchedule::kExponentialDecay: {
      const auto& s = spec.exponential_decay();
      const Checker c(base + "exponential_decay.");
      RETURN_IF_ERROR(c.Positive("init_value", s.init_value()));
      RETURN_IF_ERROR(c.Steps("transition_steps", s.transition_steps(), 1));
      RETURN_IF_ERROR(c.Positive("decay_rate", s.decay_rate()));
      RETURN_IF_ERROR(c.Steps("transition_begin", s.transition_begin(), 0));
      if (s.has_end_value()) RETURN_IF_ERROR(c.NonNegative("end_value", s.end_value()));
      return absl::OkStatus();
    }
    case v1::LearningRateSchedule::kPiecewiseConstant: {
      const auto& s = spec.piecewise_constant();
      const Checker c(base + "piecewise_constant.");
      RETURN_IF_ERROR(c.Positive("init_value", s.init_value()));
      for (const auto& [boundary, scale] : s.boundaries_and_scales()) {
        const std::string field = absl::StrCat("boundaries_and_scales[", boundary, "]");
        if (boundary < 0 || boundary > kMaxCount) {
          return c.Error(field, absl::StrCat("the step ", boundary, " is not in [0, ", kMaxCount,
                                             "] (optax counts in int32)"));
        }
        if (!(std::isfinite(scale) && scale >= 0)) {
          return c.Error(field, absl::StrCat("the scale ", scale, " is not a finite number >= 0"));
        }
      }
      return absl::OkStatus();
    }
    case v1::LearningRateSchedule::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "optimizer.schedule: name one schedule (cosine_decay, warmup_cosine_decay, "
      "exponential_decay or piecewise_constant)");
}

}  // namespace

absl::StatusOr<LearningRate> LearningRate::FromSpec(const v1::OptimizerSpec& spec) {
  LearningRate lr;
  if (!spec.has_schedule()) {
    if (!(std::isfinite(spec.learning_rate()) && spec.learning_rate() > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer.learning_rate: must be positive, got ", spec.learning_rate(),
                       " (or give a schedule instead)"));
    }
    lr.constant_ = spec.learning_rate();
    return lr;
  }
  if (spec.learning_rate() != 0) {
    return absl::InvalidArgumentError(
        "optimizer.learning_rate, optimizer.schedule: set one of them, not both (the "
        "schedule's init_value is its first learning rate)");
  }
  RETURN_IF_ERROR(CheckSchedule(spec.schedule()));
  lr.spec_ = spec.schedule();
  if (lr.spec_.has_piecewise_constant()) {
    const auto& m = lr.spec_.piecewise_constant().boundaries_and_scales();
    lr.boundaries_.assign(m.begin(), m.end());
    std::sort(lr.boundaries_.begin(), lr.boundaries_.end());
  }
  return lr;
}

float LearningRate::operator()(int64_t count) const {
  count = std::clamp<int64_t>(count, 0, kMaxCount);
  switch (spec_.kind_case()) {
    case v1::LearningRateSchedule::kCosineDecay:
      return FlushDenormal(CosineDecay(spec_.cosine_decay(), count));
    case v1::LearningRateSchedule::kWarmupCosineDecay:
      return FlushDenormal(WarmupCosineDecay(spec_.warmup_cosine_decay(), count));
    case v1::LearningRateSchedule::kExponentialDecay:
      return FlushDenormal(ExponentialDecay(spec_.exponential_decay(), count));
    case v1::LearningRateSchedule::kPiecewiseConstant: {
      // optax: v = v * indicator + (1 - indicator) * scale * v per boundary in order, with
      // indicator 0 from the boundary on: v becomes float32(scale) * v there.
      float v = static_cast<float>(spec_.piecewise_constant().init_value());
      for (const auto& [boundary, scale] : boundaries_) {
        if (count >= boundary) v = FlushDenormal(static_cast<float>(scale) * v);
      }
      return v;
    }
    case v1::LearningRateSchedule::KIND_NOT_SET:
      break;
  }
  return static_cast<float>(constant_);
}

}  // namespace lockstep
