// Specs in tests: written as YAML, validated.
#ifndef LOCKSTEP_CORE_SPEC_TESTING_H_
#define LOCKSTEP_CORE_SPEC_TESTING_H_

#include <string>

#include "core/spec/spec.h"
#include "core/testing.h"

namespace lockstep::testing {

// The spec a test writes in YAML, validated; one that does not parse or validate fails
// the test.
inline v1::JobSpec ValidSpec(const std::string& yaml) {
  absl::StatusOr<v1::JobSpec> spec = ParseSpec(yaml, "test spec");
  if (spec.ok()) spec = Validate(*spec);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(v1::JobSpec());
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_CORE_SPEC_TESTING_H_
