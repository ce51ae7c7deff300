// Flax Dropout on the GPU: the mask is bernoulli(key, keep) drawn with the very
// jax.random bits the CPU backend draws (core/rng's host/device RandomBitsAt), so masks
// are identical across backends and y = mask ? x / keep : 0 is bitwise equal. Also the
// attention's broadcast dropout (MaskedScale), bitwise equal to the CPU backend's.
#ifndef LOCKSTEP_WORKERS_CUDA_DROPOUT_CUH_
#define LOCKSTEP_WORKERS_CUDA_DROPOUT_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/rng/threefry.h"

namespace lockstep::cuda {

// `key` is in device memory (a captured graph reads each step's key).
cudaError_t Dropout(size_t n, float keep, const rng::Key* key, rng::Impl impl, const float* x,
                    float* y, uint8_t* mask, cudaStream_t stream);
// dx = mask ? dy / keep : 0.
cudaError_t DropoutBackward(size_t n, float keep, const uint8_t* mask, const float* dy, float* dx,
                            cudaStream_t stream);
// Flax's broadcast dropout: y (rows, cols) = x * (mask[c] ? scale : 0), one 0/1 mask of
// `cols` shared by every row (y may be x).
cudaError_t MaskedScale(int rows, int cols, const uint8_t* mask, float scale, const float* x,
                        float* y, cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_DROPOUT_CUH_
