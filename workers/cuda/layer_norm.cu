// Flax LayerNorm over the rows of (rows, cols), forward and backward (see Backend::LayerNorm).
// Contract: layer_norm.cuh.
#include "core/layer_math.h"
#include "workers/cuda/launch.cuh"
#include "workers/cuda/layer_norm.cuh"

namespace lockstep::cuda {
namespace {

// The CPU backend's fixed row blocks for the parameter gradients (cpu_layers.cc).
constexpr int kBlocks = 8;

__global__ void LayerNormKernel(int rows, int cols, float epsilon, const float* x,
                                const float* scale, const float* bias, float* y, float* mean,
                                float* rstd) {
  for (size_t r = FirstIndex(); r < size_t(rows); r += Stride()) {
    math::LayerNormRow(cols, epsilon, x + r * cols, scale, bias, y + r * cols, mean + r, rstd + r);
  }
}

__global__ void LayerNormDxKernel(int rows, int cols, const float* x, const float* scale,
                                  const float* mean, const float* rstd, const float* dy,
                                  float* dx) {
  for (size_t r = FirstIndex(); r < size_t(rows); r += Stride()) {
    const size_t at = r * cols;
    math::LayerNormDxRow(cols, x + at, scale, mean[r], rstd[r], dy + at, dx + at);
  }
}

__global__ void LayerNormParamsKernel(int rows, int cols, const float* x, const float* mean,
                                      const float* rstd, const float* dy, float* dscale,
                                      float* dbias) {
  for (size_t c = FirstIndex(); c < size_t(cols); c += Stride()) {
    // In double, as the CPU backend's LayerNormBackward: the same bits.
    double total_s = 0.0, total_b = 0.0;
    for (int blk = 0; blk < kBlocks; ++blk) {
      const int r0 = static_cast<int>(int64_t{rows} * blk / kBlocks);
      const int r1 = static_cast<int>(int64_t{rows} * (blk + 1) / kBlocks);
      double s = 0.0, b = 0.0;
      for (int r = r0; r < r1; ++r) {
        const size_t at = size_t(r) * cols + c;
        s += double{dy[at]} * ((x[at] - mean[r]) * rstd[r]);
        b += dy[at];
      }
      total_s += s;
      total_b += b;
    }
    if (dscale != nullptr) dscale[c] = static_cast<float>(total_s);
    if (dbias != nullptr) dbias[c] = static_cast<float>(total_b);
  }
}

}  // namespace

cudaError_t LayerNorm(int rows, int cols, float epsilon, const float* x, const float* scale,
                      const float* bias, float* y, float* mean, float* rstd, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  LayerNormKernel<<<Blocks(rows), kThreads, 0, stream>>>(rows, cols, epsilon, x, scale, bias, y,
                                                         mean, rstd);
  return cudaGetLastError();
}

cudaError_t LayerNormBackward(int rows, int cols, const float* x, const float* scale,
                              const float* mean, const float* rstd, const float* dy, float* dx,
                              float* dscale, float* dbias, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (dx != nullptr) {
    LayerNormDxKernel<<<Blocks(rows), kThreads, 0, stream>>>(rows, cols, x, scale, mean, rstd, dy,
                                                             dx);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (dscale == nullptr && dbias == nullptr) return cudaSuccess;
  LayerNormParamsKernel<<<Blocks(cols), kThreads, 0, stream>>>(rows, cols, x, mean, rstd, dy,
                                                               dscale, dbias);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
