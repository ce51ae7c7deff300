// CUDA and cuBLAS errors as absl::Status with file:line, and the macros that return
// them. Internal to workers/ (includes CUDA headers).
#ifndef LOCKSTEP_WORKERS_CUDA_CUDA_STATUS_H_
#define LOCKSTEP_WORKERS_CUDA_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"

namespace lockstep {

// An error naming `expr`, file:line and the CUDA error; OK for cudaSuccess. Codes:
// RESOURCE_EXHAUSTED for out of memory, FAILED_PRECONDITION for a missing device or
// driver, INTERNAL otherwise. Also clears the runtime's last-error state, so that a
// failed call (cudaMalloc, say) does not resurface at the next launch check.
absl::Status CudaStatus(cudaError_t error, const char* expr, const char* file, int line);

// The same for cuBLAS: RESOURCE_EXHAUSTED for allocation failures, INTERNAL otherwise.
absl::Status CublasStatus(cublasStatus_t status, const char* expr, const char* file, int line);

}  // namespace lockstep

#define CUDA_RETURN_IF_ERROR(expr)                                              \
  do {                                                                          \
    const cudaError_t ls_cuda_error_ = (expr);                                  \
    if (ls_cuda_error_ != cudaSuccess) {                                        \
      return ::lockstep::CudaStatus(ls_cuda_error_, #expr, __FILE__, __LINE__); \
    }                                                                           \
  } while (0)

#define CUBLAS_RETURN_IF_ERROR(expr)                                                 \
  do {                                                                               \
    const cublasStatus_t ls_cublas_status_ = (expr);                                 \
    if (ls_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                \
      return ::lockstep::CublasStatus(ls_cublas_status_, #expr, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)

#endif  // LOCKSTEP_WORKERS_CUDA_CUDA_STATUS_H_
