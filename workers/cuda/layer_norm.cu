#include "workers/cuda/launch.cuh"
#include "workers/cuda/layer_norm.cuh"

namespace lockstep::cuda {
namespace {

// The CPU backend's fixed row blocks for the parameter gradients (cpu_layers.cc).
constexpr int kBlocks = 8;

__global__ void LayerNormKernel(int rows, int cols, float epsilon, const float* x,
                                const float* scale, const float* bias, float* y, float* mean,
                                float* rstd) {
  const float n = static_cast<float>(cols);
  for (size_t r = FirstIndex(); r < size_t(rows); r += Stride()) {
    const float* xr = x + r * cols;
    float sum = 0.0f, sum_sq = 0.0f;
    for (int c = 0; c < cols; ++c) {
      sum += xr[c];
      sum_sq += xr[c] * xr[c];
    }
    const float m = sum / n, m2 = sum_sq / n;
    const float var = fmaxf(0.0f, m2 - m * m);
    const float rs = 1.0f / sqrtf(var + epsilon);
    mean[r] = m;
    rstd[r] = rs;
    float* yr = y + r * cols;
    for (int c = 0; c < cols; ++c) {
      const float mul = scale != nullptr ? rs * scale[c] : rs;
      const float v = (xr[c] - m) * mul;
      yr[c] = bias != nullptr ? v + bias[c] : v;
    }
  }
}

__global__ void LayerNormDxKernel(int rows, int cols, const float* x, const float* scale,
                                  const float* mean, const float* rstd, const float* dy,
                                  float* dx) {
  const float n = static_cast<float>(cols);
  for (size_t r = FirstIndex(); r < size_t(rows); r += Stride()) {
    const size_t at = r * cols;
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int c = 0; c < cols; ++c) {
      const float gc = scale != nullptr ? dy[at + c] * scale[c] : dy[at + c];
      sum_g += gc;
      sum_gx += gc * ((x[at + c] - mean[r]) * rstd[r]);
    }
    const float mean_g = sum_g / n, mean_gx = sum_gx / n;
    for (int c = 0; c < cols; ++c) {
      const float gc = scale != nullptr ? dy[at + c] * scale[c] : dy[at + c];
      const float xhat = (x[at + c] - mean[r]) * rstd[r];
      dx[at + c] = rstd[r] * ((gc - mean_g) - xhat * mean_gx);
    }
  }
}

__global__ void LayerNormParamsKernel(int rows, int cols, const float* x, const float* mean,
                                      const float* rstd, const float* dy, float* dscale,
                                      float* dbias) {
  for (size_t c = FirstIndex(); c < size_t(cols); c += Stride()) {
    float total_s = 0.0f, total_b = 0.0f;
    for (int blk = 0; blk < kBlocks; ++blk) {
      const int r0 = static_cast<int>(int64_t{rows} * blk / kBlocks);
      const int r1 = static_cast<int>(int64_t{rows} * (blk + 1) / kBlocks);
      float s = 0.0f, b = 0.0f;
      for (int r = r0; r < r1; ++r) {
        const size_t at = size_t(r) * cols + c;
        s += dy[at] * ((x[at] - mean[r]) * rstd[r]);
        b += dy[at];
      }
      total_s += s;
      total_b += b;
    }
    if (dscale != nullptr) dscale[c] = total_s;
    if (dbias != nullptr) dbias[c] = total_b;
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
