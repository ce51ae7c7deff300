// CudaBackend's dense layers: one cuBLASLt GEMM with the bias and ReLU in its epilogue
// (cublaslt_dense.h), else Backend's Gemm and BiasAdd (a shape cuBLASLt has no algorithm
// for, or no cuBLASLt handle).
#include "core/status_macros.h"
#include "workers/cuda/backend_launch.h"

namespace lockstep {

absl::Status CudaBackend::DenseForward(int rows, int out, int in, const float* x, const float* w,
                                       const float* bias, bool relu, float* y) {
  if (lt_ == nullptr) return Backend::DenseForward(rows, out, in, x, w, bias, relu, y);
  RETURN_IF_ERROR(Activate());
  absl::Status status = lt_->Forward(rows, out, in, x, w, bias, relu, y, tf32_, stream_);
  if (absl::IsUnimplemented(status))
    return Backend::DenseForward(rows, out, in, x, w, bias, relu, y);
  return status.ok() ? status : Failed(std::move(status));
}

}  // namespace lockstep
