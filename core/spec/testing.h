// Specs in tests: written as YAML, validated.
#ifndef LOCKSTEP_CORE_SPEC_TESTING_H_
#define LOCKSTEP_CORE_SPEC_TESTING_H_

#include <string>

#include "absl/strings/str_cat.h"
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

// A small job the worker-side tests train: an MLP 784-32-10 with adam on Fashion-MNIST,
// global batch 32, evaluated every 5 steps in batches of 500.
inline v1::JobSpec SmallMlpSpec(int workers = 1, int steps = 10) {
  return ValidSpec(absl::StrCat(R"(
model: {kind: mlp, hidden: [32]}
optimizer: {kind: adam, learning_rate: 0.001}
global_batch_size: 32
eval: {every_steps: 5, batch_size: 500}
steps: )",
                                steps, "\nworkers: ", workers));
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_CORE_SPEC_TESTING_H_
