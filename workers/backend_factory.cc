// BackendSource: the backends a worker computes its jobs on, chosen by its device flag ("cpu",
// "cuda" or "cuda:K") and its thread count. Contract: backend_factory.h.
#include "workers/backend_factory.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "workers/cpu/cpu_backend.h"
#ifdef LOCKSTEP_HAVE_CUDA
#include "workers/cuda/cuda_backend.h"
#endif

namespace lockstep {

absl::StatusOr<Device> ParseDevice(const std::string& device) {
  if (device == "cpu") return Device{Device::Kind::kCpu, 0};
  if (device == "cuda") return Device{Device::Kind::kCuda, 0};
  const std::string digits = absl::StartsWith(device, "cuda:") ? device.substr(5) : "";
  int index = -1;
  const bool all_digits = !digits.empty() && digits.size() <= 6 &&
                          digits.find_first_not_of("0123456789") == std::string::npos;
  if (!all_digits || !absl::SimpleAtoi(digits, &index)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device \"", device, "\": expected \"cpu\", \"cuda\" or \"cuda:K\" (K = 0, 1, ...)"));
  }
  return Device{Device::Kind::kCuda, index};
}

bool BuiltWithCuda() {
#ifdef LOCKSTEP_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<BackendSource>> BackendSource::Create(const std::string& device,
                                                                     int threads) {
  absl::StatusOr<Device> parsed = ParseDevice(device);
  if (!parsed.ok()) return parsed.status();
  if (threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("threads: ", threads, " is not positive"));
  }
  std::shared_ptr<Backend> shared;
  if (parsed->kind == Device::Kind::kCuda) {
#ifdef LOCKSTEP_HAVE_CUDA
    absl::StatusOr<std::unique_ptr<Backend>> cuda = NewCudaBackend(parsed->index);
    if (!cuda.ok()) return cuda.status();
    shared = std::move(cuda).value();
#else
    return absl::FailedPreconditionError(absl::StrCat(
        "device \"", device, "\": this worker was built without CUDA (nvcc was not found)"));
#endif
  }
  return std::unique_ptr<BackendSource>(new BackendSource(device, threads, std::move(shared)));
}

absl::StatusOr<std::shared_ptr<Backend>> BackendSource::ForJob(const v1::JobSpec& spec) const {
  if (shared_ != nullptr) return shared_;
  if (spec.threads() > static_cast<uint32_t>(threads_)) {
    return absl::FailedPreconditionError(absl::StrCat("threads: the job asks for ", spec.threads(),
                                                      " CPU threads; this worker has ", threads_));
  }
  return std::shared_ptr<Backend>(
      NewCpuBackend(spec.threads() > 0 ? static_cast<int>(spec.threads()) : threads_));
}

}  // namespace lockstep
