// Flax BatchNorm's kernels (see Backend::BatchNormMoments and the methods after it). Contract:
// batch_norm.cuh.
#include "core/backend.h"
#include "core/batch_norm_math.h"
#include "workers/cuda/batch_norm.cuh"
#include "workers/cuda/launch.cuh"

namespace lockstep::cuda {
namespace {

// The column sums' two quantities: x and x * x (moments), or dy and dy * (x - mean).
// In double, as the CPU backend's MomentSums and GradSums: each product exact.
struct MomentsOp {
  const float* x;
  __device__ void operator()(size_t at, int c, double& a, double& b) const {
    const float v = x[at];
    a = v;
    b = double{v} * v;
  }
};

struct BackwardOp {
  const float *x, *dy, *mean;
  __device__ void operator()(size_t at, int c, double& a, double& b) const {
    a = dy[at];
    b = double{dy[at]} * (x[at] - mean[c]);
  }
};

// partials[blk * 2 * cols + k * cols + c]: block blk's sum of quantity k of column c, in
// row order from 0 in double, rounded once, as the CPU backend's ColumnSums2.
template <typename Op>
__global__ void PartialsKernel(int rows, int cols, Op op, float* partials) {
  const size_t total = size_t(kBatchNormBlocks) * cols;
  for (size_t t = FirstIndex(); t < total; t += Stride()) {
    const int blk = static_cast<int>(t / cols), c = static_cast<int>(t % cols);
    const int r0 = static_cast<int>(int64_t{rows} * blk / kBatchNormBlocks);
    const int r1 = static_cast<int>(int64_t{rows} * (blk + 1) / kBatchNormBlocks);
    double a = 0.0, b = 0.0;
    for (int r = r0; r < r1; ++r) {
      double u, v;
      op(size_t(r) * cols + c, c, u, v);
      a += u;
      b += v;
    }
    partials[size_t(blk) * 2 * cols + c] = static_cast<float>(a);
    partials[size_t(blk) * 2 * cols + cols + c] = static_cast<float>(b);
  }
}

// out[k] = the blocks' partial sums of k in block order, from 0, in double (k < 2 * cols).
__device__ float BlockTotal(int cols, const float* partials, int k) {
  double total = 0.0;
  for (int blk = 0; blk < kBatchNormBlocks; ++blk) total += partials[size_t(blk) * 2 * cols + k];
  return static_cast<float>(total);
}

__global__ void MomentsKernel(int rows, int cols, const float* partials, float* moments) {
  const float n = static_cast<float>(rows);
  for (size_t k = FirstIndex(); k < size_t(2 * cols); k += Stride()) {
    moments[k] = BlockTotal(cols, partials, static_cast<int>(k)) / n;
  }
}

__global__ void BackwardSumsKernel(int cols, float epsilon, const float* var, const float* partials,
                                   float* sums, float* dscale, float* dbias) {
  for (size_t c = FirstIndex(); c < size_t(cols); c += Stride()) {
    const float a = BlockTotal(cols, partials, static_cast<int>(c));
    const float b = BlockTotal(cols, partials, static_cast<int>(cols + c));
    sums[c] = a;
    sums[cols + c] = b;
    if (dbias != nullptr) dbias[c] = a;
    if (dscale != nullptr) dscale[c] = b * math::BatchNormRsqrt(var[c], epsilon);
  }
}

__global__ void VarianceKernel(int cols, const float* moments, float* var) {
  for (size_t c = FirstIndex(); c < size_t(cols); c += Stride()) {
    var[c] = math::BatchNormVariance(moments[c], moments[cols + c]);
  }
}

__global__ void ApplyKernel(size_t n, int cols, float epsilon, const float* x, const float* mean,
                            const float* var, const float* scale, const float* bias, float* y) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) {
    const int c = static_cast<int>(i % cols);
    y[i] = math::BatchNormY(x[i], mean[c], math::BatchNormMul(var[c], epsilon, scale, c), bias, c);
  }
}

__global__ void UpdateStatsKernel(int cols, float momentum, float one_minus_momentum,
                                  const float* mean, const float* var, float* ra_mean,
                                  float* ra_var) {
  for (size_t c = FirstIndex(); c < size_t(cols); c += Stride()) {
    ra_mean[c] = momentum * ra_mean[c] + one_minus_momentum * mean[c];
    ra_var[c] = momentum * ra_var[c] + one_minus_momentum * var[c];
  }
}

__global__ void BackwardApplyKernel(size_t n, int rows, int cols, float epsilon, int replicas,
                                    const float* x, const float* dy, const float* moments,
                                    const float* var, const float* scale, const float* sums,
                                    float* dx) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) {
    const int c = static_cast<int>(i % cols);
    const math::BatchNormGrad g =
        math::BatchNormGradFor(moments[c], moments[cols + c], var[c], epsilon, scale, c, sums[c],
                               sums[cols + c], replicas, rows);
    dx[i] = math::BatchNormDx(g, x[i], dy[i]);
  }
}

}  // namespace

cudaError_t BatchNormMoments(int rows, int cols, const float* x, float* partials, float* moments,
                             cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  PartialsKernel<<<Blocks(size_t(kBatchNormBlocks) * cols), kThreads, 0, stream>>>(
      rows, cols, MomentsOp{x}, partials);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  MomentsKernel<<<Blocks(2 * size_t(cols)), kThreads, 0, stream>>>(rows, cols, partials, moments);
  return cudaGetLastError();
}

cudaError_t BatchNormVariance(int cols, const float* moments, float* var, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  VarianceKernel<<<Blocks(cols), kThreads, 0, stream>>>(cols, moments, var);
  return cudaGetLastError();
}

cudaError_t BatchNormApply(int rows, int cols, float epsilon, const float* x, const float* mean,
                           const float* var, const float* scale, const float* bias, float* y,
                           cudaStream_t stream) {
  const size_t n = size_t(rows) * cols;
  if (n == 0) return cudaSuccess;
  ApplyKernel<<<Blocks(n), kThreads, 0, stream>>>(n, cols, epsilon, x, mean, var, scale, bias, y);
  return cudaGetLastError();
}

cudaError_t BatchNormUpdateStats(int cols, float momentum, float one_minus_momentum,
                                 const float* mean, const float* var, float* ra_mean, float* ra_var,
                                 cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  UpdateStatsKernel<<<Blocks(cols), kThreads, 0, stream>>>(cols, momentum, one_minus_momentum, mean,
                                                           var, ra_mean, ra_var);
  return cudaGetLastError();
}

cudaError_t BatchNormBackwardReduce(int rows, int cols, float epsilon, const float* x,
                                    const float* dy, const float* mean, const float* var,
                                    float* partials, float* sums, float* dscale, float* dbias,
                                    cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  PartialsKernel<<<Blocks(size_t(kBatchNormBlocks) * cols), kThreads, 0, stream>>>(
      rows, cols, BackwardOp{x, dy, mean}, partials);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  BackwardSumsKernel<<<Blocks(cols), kThreads, 0, stream>>>(cols, epsilon, var, partials, sums,
                                                            dscale, dbias);
  return cudaGetLastError();
}

cudaError_t BatchNormBackwardApply(int rows, int cols, float epsilon, int replicas, const float* x,
                                   const float* dy, const float* moments, const float* var,
                                   const float* scale, const float* sums, float* dx,
                                   cudaStream_t stream) {
  const size_t n = size_t(rows) * cols;
  if (n == 0) return cudaSuccess;
  BackwardApplyKernel<<<Blocks(n), kThreads, 0, stream>>>(n, rows, cols, epsilon, replicas, x, dy,
                                                          moments, var, scale, sums, dx);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
