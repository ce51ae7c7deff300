// Flax Dropout on the GPU, with the very jax.random bits the CPU backend draws, so that masks are
// identical across backends. Contract: dropout.cuh.
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

// multiplier = mask.astype(float32) / float32(keep) (1 / keep computed once, on the host,
// as the CPU backend does), then x * multiplier.
__global__ void MaskedScaleKernel(int rows, int cols, const uint8_t* mask, float scale,
                                  const float* x, float* y) {
  const size_t n = size_t(rows) * cols;
  for (size_t i = FirstIndex(); i < n; i += Stride()) y[i] = x[i] * (mask[i % cols] ? scale : 0.0f);
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

cudaError_t MaskedScale(int rows, int cols, const uint8_t* mask, float keep, const float* x,
                        float* y, cudaStream_t stream) {
  const size_t n = size_t(rows > 0 ? rows : 0) * (cols > 0 ? cols : 0);
  if (n == 0) return cudaSuccess;
  const float scale = 1.0f / keep;
  MaskedScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(rows, cols, mask, scale, x, y);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
