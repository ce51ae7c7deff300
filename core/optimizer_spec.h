// OptimizerFromSpec, LearningRateFromSpec: a spec's `optimizer` (v1::OptimizerSpec) into
// the step's Optimizer and LearningRate, each field checked so that a bad one is
// INVALID_ARGUMENT naming it. The step library links no protobuf: this translation is
// the spec library's (core/CMakeLists.txt).
#ifndef LOCKSTEP_CORE_OPTIMIZER_SPEC_H_
#define LOCKSTEP_CORE_OPTIMIZER_SPEC_H_

#include "absl/status/statusor.h"
#include "core/learning_rate.h"
#include "core/optimizer.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

// From optimizer.learning_rate or optimizer.schedule (exactly one of them).
// INVALID_ARGUMENT naming the field: "optimizer.schedule.cosine_decay.decay_steps: 0 is
// not > 0".
absl::StatusOr<LearningRate> LearningRateFromSpec(const v1::OptimizerSpec& spec);

// INVALID_ARGUMENT naming the field (optimizer.kind, optimizer.learning_rate,
// optimizer.schedule.cosine_decay.decay_steps, ...).
absl::StatusOr<Optimizer> OptimizerFromSpec(const v1::OptimizerSpec& spec);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_OPTIMIZER_SPEC_H_
