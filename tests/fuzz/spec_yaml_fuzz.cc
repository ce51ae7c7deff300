// Fuzzes the spec parser (core/spec/spec.h) on YAML, as `lockstep train` and SubmitJob
// read a user's spec, then the checks that follow it: Validate, SetupFromSpec. A spec
// that validates must come back unchanged through its JSON form (how the coordinator
// stores it in job records and checkpoint metadata).
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/spec/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<v1::JobSpec> spec = ParseSpec(text, "fuzz");
  if (!spec.ok()) return 0;
  absl::StatusOr<v1::JobSpec> valid = Validate(*spec);
  if (!valid.ok()) return 0;
  if (!SetupFromSpec(*valid).ok()) std::abort();  // Validate checked the same fields
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(*valid, &json).ok()) std::abort();
  absl::StatusOr<v1::JobSpec> back = ParseSpec(json, "fuzz (as JSON)");
  if (!back.ok() || !google::protobuf::util::MessageDifferencer::Equals(*back, *valid))
    std::abort();
  return 0;
}
