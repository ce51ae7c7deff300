// Helpers for the Model tests (model_test, model_blocks_test, model_sequence_test).
#ifndef LOCKSTEP_CORE_MODEL_TESTING_H_
#define LOCKSTEP_CORE_MODEL_TESTING_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model.h"
#include "core/model_spec.h"
#include "core/spec/spec.h"
#include "core/status_macros.h"

namespace lockstep::testing {

// The model of a spec written in YAML.
inline absl::StatusOr<Model> FromYaml(const std::string& yaml) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, ParseSpec(yaml, "model.yaml"));
  return ModelFromSpec(spec.model());
}

// The names of a layout's entries, in order (params or batch_stats).
inline std::vector<std::string> Names(const ParamLayout& layout) {
  std::vector<std::string> names;
  for (const ParamEntry& e : layout.entries()) names.push_back(e.name);
  return names;
}

inline std::vector<std::string> ParamNames(const Model& m) { return Names(m.layout()); }

}  // namespace lockstep::testing

#endif  // LOCKSTEP_CORE_MODEL_TESTING_H_
