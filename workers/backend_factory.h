// BackendSource: the backends a worker computes its jobs on, chosen by its device flag
// ("cpu", "cuda" or "cuda:K") and its thread count. A CPU job gets a backend of its own
// that computes with the job's `threads` (0: all of the worker's), which may not exceed
// the worker's; the jobs of a CUDA worker share the device's one backend (`threads` does
// not apply to them). A worker built without CUDA, or started where no GPU is usable, gets
// a FAILED_PRECONDITION that says so, which it reports as it refuses to start.
#ifndef LOCKSTEP_WORKERS_BACKEND_FACTORY_H_
#define LOCKSTEP_WORKERS_BACKEND_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "lockstep/v1/spec.pb.h"

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

// Thread-safe.
class BackendSource {
 public:
  // `threads`: the worker's CPU threads, >= 1. Errors: INVALID_ARGUMENT from ParseDevice;
  // FAILED_PRECONDITION "this worker was built without CUDA" or "no CUDA device..." (no
  // driver, no GPU, or no device K); what NewCudaBackend returns otherwise.
  static absl::StatusOr<std::unique_ptr<BackendSource>> Create(const std::string& device,
                                                               int threads);

  const std::string& device() const { return device_; }
  int threads() const { return threads_; }

  // The backend for a job: FAILED_PRECONDITION naming `threads` when a CPU job asks for
  // more threads than this worker has.
  absl::StatusOr<std::shared_ptr<Backend>> ForJob(const v1::JobSpec& spec) const;

 private:
  BackendSource(std::string device, int threads, std::shared_ptr<Backend> shared)
      : device_(std::move(device)), threads_(threads), shared_(std::move(shared)) {}
  const std::string device_;
  const int threads_;
  const std::shared_ptr<Backend> shared_;  // the CUDA device's backend; null on the CPU
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_BACKEND_FACTORY_H_
