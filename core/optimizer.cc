// Optimizer: optax's sgd (with momentum, optionally Nesterov's), adam and adamw, with a constant
// learning rate or an optax schedule, optionally chained after clip_by_global_norm. Contract:
// optimizer.h.
#include "core/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

absl::Status InRange(const char* field, double v, double lo, double hi) {
  if (std::isfinite(v) && v >= lo && v < hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer.", field, ": ", v, " is not in [", lo, ", ", hi, ")"));
}

}  // namespace

absl::StatusOr<Optimizer> Optimizer::FromSpec(const v1::OptimizerSpec& spec) {
  Optimizer o;
  if (spec.kind() == "sgd") {
    o.kind_ = Kind::kSgd;
  } else if (spec.kind() == "adam") {
    o.kind_ = Kind::kAdam;
  } else if (spec.kind() == "adamw") {
    o.kind_ = Kind::kAdamW;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.kind: unknown optimizer \"",
                                                   spec.kind(),
                                                   "\" (expected \"sgd\", \"adam\" or \"adamw\")"));
  }
  ASSIGN_OR_RETURN(o.learning_rate_, LearningRate::FromSpec(spec));
  if (!(std::isfinite(spec.clip_by_global_norm()) && spec.clip_by_global_norm() >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.clip_by_global_norm: ", spec.clip_by_global_norm(),
                     " is not a finite number >= 0 (0: no clipping)"));
  }
  o.clip_norm_ = spec.clip_by_global_norm();
  if (o.kind_ == Kind::kSgd) {
    if (spec.has_b1() || spec.has_b2() || spec.has_eps() || spec.has_weight_decay()) {
      return absl::InvalidArgumentError(
          "optimizer: b1, b2, eps and weight_decay apply to adam and adamw, not sgd");
    }
    RETURN_IF_ERROR(InRange("momentum", spec.momentum(), 0.0, 1.0));
    o.momentum_ = spec.momentum();
    if (spec.nesterov() && o.momentum_ == 0) {
      return absl::InvalidArgumentError(
          "optimizer.nesterov: needs momentum > 0 (optax applies Nesterov's update to the "
          "momentum trace)");
    }
    o.nesterov_ = spec.nesterov();
    if (o.momentum_ > 0) o.slots_ = {"trace"};
    return o;
  }
  if (spec.momentum() != 0) {
    return absl::InvalidArgumentError("optimizer.momentum: applies to sgd only (use b1)");
  }
  if (spec.nesterov()) return absl::InvalidArgumentError("optimizer.nesterov: applies to sgd only");
  if (o.kind_ == Kind::kAdam && spec.has_weight_decay()) {
    return absl::InvalidArgumentError("optimizer.weight_decay: applies to adamw only");
  }
  if (spec.has_b1()) o.b1_ = spec.b1();
  if (spec.has_b2()) o.b2_ = spec.b2();
  if (spec.has_eps()) o.eps_ = spec.eps();
  if (o.kind_ == Kind::kAdamW)
    o.weight_decay_ = spec.has_weight_decay() ? spec.weight_decay() : 1e-4;
  for (auto st : {InRange("b1", o.b1_, 0, 1), InRange("b2", o.b2_, 0, 1),
                  InRange("eps", o.eps_, 0, 1), InRange("weight_decay", o.weight_decay_, 0, 1)}) {
    if (!st.ok()) return st;
  }
  o.slots_ = {"mu", "nu"};
  return o;
}

UpdateScalars Optimizer::Scalars(int64_t count) const {
  // optax computes 1 - b in Python (double) and b^t in float32 from the int32 count.
  const float b1 = static_cast<float>(b1_), b2 = static_cast<float>(b2_);
  const float t = static_cast<float>(count + 1);
  return UpdateScalars{learning_rate_(count),
                       b1,
                       b2,
                       static_cast<float>(1.0 - b1_),
                       static_cast<float>(1.0 - b2_),
                       1.0f - std::pow(b1, t),
                       1.0f - std::pow(b2, t),
                       static_cast<float>(eps_),
                       static_cast<float>(weight_decay_)};
}

size_t Optimizer::ScratchBytes(size_t n) const {
  return clip_norm_ > 0 ? (SumSquaresPartials(n) + 1) * sizeof(double) : 0;
}

absl::Status Optimizer::Apply(Backend& backend, size_t n, int replicas,
                              const UpdateScalars* scalars, void* scratch, float* grads,
                              const std::vector<float*>& slots, float* params) const {
  Backend::UpdateStep u;
  u.adam = kind_ != Kind::kSgd;
  u.divisor = static_cast<float>(replicas);
  // optax.clip_by_global_norm: the norm of all gradients, then where(norm < max, g,
  // g / norm * max).
  u.max_norm = static_cast<float>(clip_norm_);
  u.momentum = static_cast<float>(momentum_);
  u.nesterov = nesterov_;
  return backend.ApplyUpdate(u, n, scalars, static_cast<double*>(scratch), grads,
                             slots.empty() ? nullptr : slots[0],
                             slots.size() > 1 ? slots[1] : nullptr, params);
}

}  // namespace lockstep
