// Flax BatchNorm's kernels (see Backend::BatchNormMoments and the methods after it).
// Bitwise equal to the CPU backend: one thread per (row block, channel) sums its block in
// row order, one thread per channel adds the kBatchNormBlocks partial sums in block order
// (no atomics), and the per-element arithmetic is core/batch_norm_math.h's.
#ifndef LOCKSTEP_WORKERS_CUDA_BATCH_NORM_CUH_
#define LOCKSTEP_WORKERS_CUDA_BATCH_NORM_CUH_

#include <cuda_runtime.h>

namespace lockstep::cuda {

cudaError_t BatchNormMoments(int rows, int cols, const float* x, float* partials, float* moments,
                             cudaStream_t stream);
cudaError_t BatchNormVariance(int cols, const float* moments, float* var, cudaStream_t stream);
cudaError_t BatchNormApply(int rows, int cols, float epsilon, const float* x, const float* mean,
                           const float* var, const float* scale, const float* bias, float* y,
                           cudaStream_t stream);
cudaError_t BatchNormUpdateStats(int cols, float momentum, float one_minus_momentum,
                                 const float* mean, const float* var, float* ra_mean, float* ra_var,
                                 cudaStream_t stream);
cudaError_t BatchNormBackwardReduce(int rows, int cols, float epsilon, const float* x,
                                    const float* dy, const float* mean, const float* var,
                                    float* partials, float* sums, float* dscale, float* dbias,
                                    cudaStream_t stream);
cudaError_t BatchNormBackwardApply(int rows, int cols, float epsilon, int replicas, const float* x,
                                   const float* dy, const float* moments, const float* var,
                                   const float* scale, const float* sums, float* dx,
                                   cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_BATCH_NORM_CUH_
