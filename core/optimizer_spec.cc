// OptimizerFromSpec, LearningRateFromSpec: a spec's optimizer into the step's Optimizer,
// every field checked on the way. Contract: optimizer_spec.h.
#include "core/optimizer_spec.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

// optax counts in int32 and saturates there.
constexpr int64_t kMaxCount = std::numeric_limits<int32_t>::max();

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

absl::Status NoSchedule() {
  return absl::InvalidArgumentError(
      "optimizer.schedule: name one schedule (cosine_decay, warmup_cosine_decay, "
      "exponential_decay or piecewise_constant)");
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
  return NoSchedule();
}

absl::Status InRange(const char* field, double v, double lo, double hi) {
  if (std::isfinite(v) && v >= lo && v < hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer.", field, ": ", v, " is not in [", lo, ", ", hi, ")"));
}

}  // namespace

absl::StatusOr<LearningRate> LearningRateFromSpec(const v1::OptimizerSpec& spec) {
  if (!spec.has_schedule()) {
    if (!(std::isfinite(spec.learning_rate()) && spec.learning_rate() > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer.learning_rate: must be positive, got ", spec.learning_rate(),
                       " (or give a schedule instead)"));
    }
    return LearningRate(spec.learning_rate());
  }
  if (spec.learning_rate() != 0) {
    return absl::InvalidArgumentError(
        "optimizer.learning_rate, optimizer.schedule: set one of them, not both (the "
        "schedule's init_value is its first learning rate)");
  }
  const v1::LearningRateSchedule& schedule = spec.schedule();
  RETURN_IF_ERROR(CheckSchedule(schedule));
  switch (schedule.kind_case()) {
    case v1::LearningRateSchedule::kCosineDecay: {
      const auto& s = schedule.cosine_decay();
      return LearningRate(LearningRate::CosineDecay{s.init_value(), s.decay_steps(), s.alpha(),
                                                    s.has_exponent() ? s.exponent() : 1.0});
    }
    case v1::LearningRateSchedule::kWarmupCosineDecay: {
      const auto& s = schedule.warmup_cosine_decay();
      return LearningRate(LearningRate::WarmupCosineDecay{
          s.init_value(), s.peak_value(), s.warmup_steps(), s.decay_steps(), s.end_value(),
          s.has_exponent() ? s.exponent() : 1.0});
    }
    case v1::LearningRateSchedule::kExponentialDecay: {
      const auto& s = schedule.exponential_decay();
      return LearningRate(LearningRate::ExponentialDecay{
          s.init_value(), s.transition_steps(), s.decay_rate(), s.transition_begin(), s.staircase(),
          s.has_end_value() ? std::optional<double>(s.end_value()) : std::nullopt});
    }
    case v1::LearningRateSchedule::kPiecewiseConstant: {
      const auto& s = schedule.piecewise_constant();
      LearningRate::PiecewiseConstant p{s.init_value(), {}};
      p.boundaries_and_scales.assign(s.boundaries_and_scales().begin(),
                                     s.boundaries_and_scales().end());
      return LearningRate(std::move(p));
    }
    case v1::LearningRateSchedule::KIND_NOT_SET:
      break;
  }
  return NoSchedule();
}

absl::StatusOr<Optimizer> OptimizerFromSpec(const v1::OptimizerSpec& spec) {
  Optimizer::Options o;
  if (spec.kind() == "sgd") {
    o.kind = Optimizer::Kind::kSgd;
  } else if (spec.kind() == "adam") {
    o.kind = Optimizer::Kind::kAdam;
  } else if (spec.kind() == "adamw") {
    o.kind = Optimizer::Kind::kAdamW;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.kind: unknown optimizer \"",
                                                   spec.kind(),
                                                   "\" (expected \"sgd\", \"adam\" or \"adamw\")"));
  }
  ASSIGN_OR_RETURN(o.learning_rate, LearningRateFromSpec(spec));
  if (!(std::isfinite(spec.clip_by_global_norm()) && spec.clip_by_global_norm() >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.clip_by_global_norm: ", spec.clip_by_global_norm(),
                     " is not a finite number >= 0 (0: no clipping)"));
  }
  o.clip_norm = spec.clip_by_global_norm();
  if (o.kind == Optimizer::Kind::kSgd) {
    if (spec.has_b1() || spec.has_b2() || spec.has_eps() || spec.has_weight_decay()) {
      return absl::InvalidArgumentError(
          "optimizer: b1, b2, eps and weight_decay apply to adam and adamw, not sgd");
    }
    RETURN_IF_ERROR(InRange("momentum", spec.momentum(), 0.0, 1.0));
    o.momentum = spec.momentum();
    if (spec.nesterov() && o.momentum == 0) {
      return absl::InvalidArgumentError(
          "optimizer.nesterov: needs momentum > 0 (optax applies Nesterov's update to the "
          "momentum trace)");
    }
    o.nesterov = spec.nesterov();
    return Optimizer(o);
  }
  if (spec.momentum() != 0) {
    return absl::InvalidArgumentError("optimizer.momentum: applies to sgd only (use b1)");
  }
  if (spec.nesterov()) return absl::InvalidArgumentError("optimizer.nesterov: applies to sgd only");
  if (o.kind == Optimizer::Kind::kAdam && spec.has_weight_decay()) {
    return absl::InvalidArgumentError("optimizer.weight_decay: applies to adamw only");
  }
  if (spec.has_b1()) o.b1 = spec.b1();
  if (spec.has_b2()) o.b2 = spec.b2();
  if (spec.has_eps()) o.eps = spec.eps();
  if (o.kind == Optimizer::Kind::kAdamW)
    o.weight_decay = spec.has_weight_decay() ? spec.weight_decay() : 1e-4;
  for (auto st : {InRange("b1", o.b1, 0, 1), InRange("b2", o.b2, 0, 1), InRange("eps", o.eps, 0, 1),
                  InRange("weight_decay", o.weight_decay, 0, 1)}) {
    if (!st.ok()) return st;
  }
  return Optimizer(o);
}

}  // namespace lockstep
