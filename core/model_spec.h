// ModelFromSpec: a spec's `model` (v1::ModelSpec: a preset or a list of layers and
// blocks) into the step's Model, every field and shape checked on the way. The step
// library links no protobuf: this translation is the spec library's (core/CMakeLists.txt).
#ifndef LOCKSTEP_CORE_MODEL_SPEC_H_
#define LOCKSTEP_CORE_MODEL_SPEC_H_

#include "absl/status/statusor.h"
#include "core/model.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

// The preset or layer list in `spec`; INVALID_ARGUMENT naming the field (model.kind,
// model.hidden, model.layers[2].kernel_size...) and the shapes involved.
absl::StatusOr<Model> ModelFromSpec(const v1::ModelSpec& spec);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_MODEL_SPEC_H_
