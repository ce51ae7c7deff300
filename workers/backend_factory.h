// MakeBackend: the backend a worker computes on, chosen by its device flag: "cpu" or
// "cuda:K" ("cuda" is cuda:0). A worker built without CUDA, or started where no GPU is
// usable, gets a FAILED_PRECONDITION that says so, which it reports as it refuses to
// start.
#ifndef LOCKSTEP_WORKERS_BACKEND_FACTORY_H_
#define LOCKSTEP_WORKERS_BACKEND_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/backend.h"

namespace lockstep {

struct Device {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;  // the CUDA device ordinal; 0 for the CPU
  friend bool operator==(const Device&, const Device&) = default;
};

// "cpu", "cuda" or "cuda:K" (K a decimal ordinal); INVALID_ARGUMENT naming the string
// otherwise.
absl::StatusOr<Device> ParseDevice(const std::string& device);

// Whether this binary has the CUDA backend (built where nvcc was found).
bool BuiltWithCuda();

// The backend for `device`. Errors: INVALID_ARGUMENT from ParseDevice;
// FAILED_PRECONDITION "this worker was built without CUDA" or "no CUDA device..." (no
// driver, no GPU, or no device K); what NewCudaBackend returns otherwise.
// TF32 is a per-job setting (Backend::SetTf32).
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& device);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_BACKEND_FACTORY_H_
