// Optimizer: optax's sgd (with momentum), adam and adamw, configured from the spec.
// The update itself is a backend kernel over the flat parameter array; this class holds
// hyperparameters, names the state slots and derives the per-step scalars.
#ifndef LOCKSTEP_CORE_OPTIMIZER_H_
#define LOCKSTEP_CORE_OPTIMIZER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

class Optimizer {
 public:
  enum class Kind { kSgd, kAdam, kAdamW };

  // INVALID_ARGUMENT naming the field (optimizer.kind, optimizer.learning_rate, ...).
  static absl::StatusOr<Optimizer> FromSpec(const v1::OptimizerSpec& spec);

  Kind kind() const { return kind_; }
  // State slots, each the size of the params: {"trace"}, {"mu", "nu"} or {} (plain sgd).
  const std::vector<std::string>& slots() const { return slots_; }

  // adam/adamw's scalars for the update after `count` updates (optax's state.count).
  AdamScalars Scalars(int64_t count) const;

  // Applies one update given the (already averaged) gradients; `scalars` is Scalars(count)
  // in backend memory (ignored by sgd).
  void Apply(Backend& backend, size_t n, const AdamScalars* scalars, const float* grads,
             const std::vector<float*>& slots, float* params) const;

 private:
  Kind kind_ = Kind::kSgd;
  double lr_ = 0, momentum_ = 0, b1_ = 0.9, b2_ = 0.999, eps_ = 1e-8, weight_decay_ = 0;
  std::vector<std::string> slots_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_OPTIMIZER_H_
