#include "core/rng/random.h"
#include "workers/cuda/dropout.cuh"
#include "workers/cuda/launch.cuh"

namespace lockstep::cuda {
namespace {

__global__ void DropoutKernel(size_t n, float keep, const rng::Key* key, rng::Impl impl,
                              const float* x, float* y, uint8_t* mask) {
  const rng::Key k = *key;
  for (size_t i = FirstIndex(); i < n; i += Stride()) {
    const bool m = rng::BitsToUnitFloat(rng::RandomBitsAt(k, impl, i, n)) < keep;
    mask[i] = m ? 1 : 0;
    y[i] = m ? x[i] / keep : 0.0f;
  }
}

__global__ void DropoutBackwardKernel(size_t n, float keep, const uint8_t* mask, const float* dy,
                                      float* dx) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) dx[i] = mask[i] ? dy[i] / keep : 0.0f;
}

}  // namespace

cudaError_t Dropout(size_t n, float keep, const rng::Key* key, rng::Impl impl, const float* x,
                    float* y, uint8_t* mask, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  DropoutKernel<<<Blocks(n), kThreads, 0, stream>>>(n, keep, key, impl, x, y, mask);
  return cudaGetLastError();
}

cudaError_t DropoutBackward(size_t n, float keep, const uint8_t* mask, const float* dy, float* dx,
                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  DropoutBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(n, keep, mask, dy, dx);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
