// Flax LayerNorm over the rows of (rows, cols), forward and backward (see
// Backend::LayerNorm). Bitwise equal to the CPU backend: one thread per row sums it in
// column order, and one thread per column sums the parameter gradients over the same 8
// row blocks in the same order (no atomics).
#ifndef LOCKSTEP_WORKERS_CUDA_LAYER_NORM_CUH_
#define LOCKSTEP_WORKERS_CUDA_LAYER_NORM_CUH_

#include <cuda_runtime.h>

namespace lockstep::cuda {

// y, and each row's mean and rstd; scale and bias may be null.
cudaError_t LayerNorm(int rows, int cols, float epsilon, const float* x, const float* scale,
                      const float* bias, float* y, float* mean, float* rstd, cudaStream_t stream);
// dx (may be null), dscale and dbias (null where absent), overwritten.
cudaError_t LayerNormBackward(int rows, int cols, const float* x, const float* scale,
                              const float* mean, const float* rstd, const float* dy, float* dx,
                              float* dscale, float* dbias, cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_LAYER_NORM_CUH_
