// Optimizer: optax's sgd (with momentum, optionally Nesterov's), adam and adamw, with a constant
// learning rate or an optax schedule, optionally chained after clip_by_global_norm. Contract:
// optimizer.h.
#include "core/optimizer.h"

#include <cmath>

namespace lockstep {

Optimizer::Optimizer(const Options& options)
    : kind_(options.kind), learning_rate_(options.learning_rate), clip_norm_(options.clip_norm) {
  if (kind_ == Kind::kSgd) {
    momentum_ = options.momentum;
    nesterov_ = options.nesterov;
    if (momentum_ > 0) slots_ = {"trace"};
    return;
  }
  b1_ = options.b1;
  b2_ = options.b2;
  eps_ = options.eps;
  if (kind_ == Kind::kAdamW) weight_decay_ = options.weight_decay;
  slots_ = {"mu", "nu"};
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
