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

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& device) {
  absl::StatusOr<Device> parsed = ParseDevice(device);
  if (!parsed.ok()) return parsed.status();
  if (parsed->kind == Device::Kind::kCpu) return NewCpuBackend();
#ifdef LOCKSTEP_HAVE_CUDA
  return NewCudaBackend(parsed->index);
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "device \"", device, "\": this worker was built without CUDA (nvcc was not found)"));
#endif
}

}  // namespace lockstep
