// CudaBackend's exact-sum conversions (exact_sum.cu): logical replicas on a CUDA worker
// (core/exact_sum_device.h).
#include "workers/cuda/backend_launch.h"
#include "workers/cuda/exact_sum.cuh"

namespace lockstep {

absl::Status CudaBackend::ExactBlockExponents(size_t n, size_t block, const float* x,
                                              bool accumulate, int64_t* exponents) {
  LS_LAUNCH(cuda::ExactBlockExponents(n, block, x, accumulate, exponents, stream_));
}

absl::Status CudaBackend::ExactToFixed(size_t n, size_t block, int headroom,
                                       const int64_t* exponents, const float* x, bool accumulate,
                                       int64_t* fixed) {
  LS_LAUNCH(cuda::ExactToFixed(n, block, headroom, exponents, x, accumulate, fixed, stream_));
}

absl::Status CudaBackend::ExactFromFixed(size_t n, size_t block, int headroom,
                                         const int64_t* exponents, const int64_t* fixed,
                                         float* out) {
  LS_LAUNCH(cuda::ExactFromFixed(n, block, headroom, exponents, fixed, out, stream_));
}

}  // namespace lockstep
