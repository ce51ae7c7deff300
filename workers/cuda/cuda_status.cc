// CUDA and cuBLAS errors as absl::Status with file:line, and the macros that return them. Contract:
// cuda_status.h.
#include "workers/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::Status CudaStatus(cudaError_t error, const char* expr, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  const std::string message = absl::StrCat(
      file, ":", line, ": ", expr, ": ", cudaGetErrorName(error), ": ", cudaGetErrorString(error));
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CublasStatus(cublasStatus_t status, const char* expr, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message =
      absl::StrCat(file, ":", line, ": ", expr, ": ", cublasGetStatusName(status), ": ",
                   cublasGetStatusString(status));
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

}  // namespace lockstep
