// Optimizer: optax's sgd (with momentum, optionally Nesterov's), adam and adamw, with a
// constant learning rate or an optax schedule, optionally chained after
// clip_by_global_norm; configured in C++ (Optimizer::Options) or from a spec
// (OptimizerFromSpec, core/optimizer_spec.h). The update itself is backend kernels over
// the flat parameter array; this class holds hyperparameters, names the state slots and
// derives the per-step scalars (the schedule's learning rate among them), which the step
// copies into backend memory so that a replayed graph reads each step's values.
#ifndef LOCKSTEP_CORE_OPTIMIZER_H_
#define LOCKSTEP_CORE_OPTIMIZER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/learning_rate.h"

namespace lockstep {

class Optimizer {
 public:
  enum class Kind { kSgd, kAdam, kAdamW };

  // optax's arguments, taken as given (OptimizerFromSpec checks a spec's: b1, b2, eps and
  // weight_decay in [0, 1), momentum and Nesterov's for sgd only, ...).
  struct Options {
    Kind kind = Kind::kSgd;
    LearningRate learning_rate;
    double momentum = 0;                      // sgd: 0, or the trace's decay
    bool nesterov = false;                    // sgd with momentum > 0
    double b1 = 0.9, b2 = 0.999, eps = 1e-8;  // adam, adamw
    double weight_decay = 0;                  // adamw
    double clip_norm = 0;                     // clip_by_global_norm's max_norm; 0: no clipping
  };

  Optimizer() = default;  // sgd at the constant learning rate 0
  explicit Optimizer(const Options& options);

  Kind kind() const { return kind_; }
  // State slots, each the size of the params: {"trace"}, {"mu", "nu"} or {} (plain sgd).
  const std::vector<std::string>& slots() const { return slots_; }
  const LearningRate& learning_rate() const { return learning_rate_; }
  // clip_by_global_norm's max_norm; 0: no clipping.
  double clip_norm() const { return clip_norm_; }

  // The scalars of the update after `count` updates (optax's state.count): the
  // schedule's learning rate, and adam/adamw's.
  UpdateScalars Scalars(int64_t count) const;

  // Backend memory Apply needs besides the slots, for `n` params (clipping's partial
  // sums; 0 without clipping).
  size_t ScratchBytes(size_t n) const;

  // Applies one update given the gradients summed over `replicas` (divided by it first:
  // pmean's division; 1 for gradients already averaged) as one Backend::ApplyUpdate;
  // `scalars` is Scalars(count) in backend memory and `scratch` ScratchBytes(n) of it.
  // `grads` ends divided and clipped. Errors: the backend's kernels'.
  absl::Status Apply(Backend& backend, size_t n, int replicas, const UpdateScalars* scalars,
                     void* scratch, float* grads, const std::vector<float*>& slots,
                     float* params) const;

 private:
  Kind kind_ = Kind::kSgd;
  LearningRate learning_rate_;
  double momentum_ = 0, b1_ = 0.9, b2_ = 0.999, eps_ = 1e-8, weight_decay_ = 0;
  double clip_norm_ = 0;
  bool nesterov_ = false;
  std::vector<std::string> slots_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_OPTIMIZER_H_
