// The attention weights' softmax over rows of scores, with the optional causal mask, and the
// gradient through a softmax (see Backend::AttentionSoftmax, SoftmaxBackward). Contract:
// attention_softmax.cuh.
#include <cfloat>

#include "core/layer_math.h"
#include "workers/cuda/attention_softmax.cuh"
#include "workers/cuda/launch.cuh"

namespace lockstep::cuda {
namespace {

__global__ void AttentionSoftmaxKernel(int rows, int t, bool causal, float* s) {
  for (size_t r = FirstIndex(); r < size_t(rows); r += Stride()) {
    float* x = s + r * t;
    if (causal) {
      for (int k = static_cast<int>(r % t) + 1; k < t; ++k) x[k] = -FLT_MAX;  // finfo.min
    }
    float mx = x[0];
    for (int k = 1; k < t; ++k) mx = fmaxf(mx, x[k]);
    float sum = 0.0f;
    for (int k = 0; k < t; ++k) {
      x[k] = expf(x[k] - mx);
      sum += x[k];
    }
    for (int k = 0; k < t; ++k) x[k] = x[k] / sum;
  }
}

__global__ void AttentionSoftmaxBf16Kernel(int rows, int t, bool causal, float* s) {
  for (size_t r = FirstIndex(); r < size_t(rows); r += Stride()) {
    math::SoftmaxRowBf16(causal ? static_cast<int>(r % t) + 1 : t, t, s + r * t);
  }
}

__global__ void SoftmaxBackwardKernel(int rows, int cols, const float* p, float* dp) {
  for (size_t r = FirstIndex(); r < size_t(rows); r += Stride()) {
    const float* y = p + r * cols;
    float* g = dp + r * cols;
    // As the CPU backend's (cpu_sequence.cc): the dot in double, g - dot rounded once.
    double dot = 0.0;
    for (int c = 0; c < cols; ++c) dot += double{g[c]} * y[c];
    for (int c = 0; c < cols; ++c) g[c] = y[c] * static_cast<float>(g[c] - dot);
  }
}

}  // namespace

cudaError_t AttentionSoftmax(int rows, int t, bool causal, float* s, cudaStream_t stream) {
  if (rows <= 0 || t <= 0) return cudaSuccess;
  AttentionSoftmaxKernel<<<Blocks(rows), kThreads, 0, stream>>>(rows, t, causal, s);
  return cudaGetLastError();
}

cudaError_t AttentionSoftmaxBf16(int rows, int t, bool causal, float* s, cudaStream_t stream) {
  if (rows <= 0 || t <= 0) return cudaSuccess;
  AttentionSoftmaxBf16Kernel<<<Blocks(rows), kThreads, 0, stream>>>(rows, t, causal, s);
  return cudaGetLastError();
}

cudaError_t SoftmaxBackward(int rows, int cols, const float* p, float* dp, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  SoftmaxBackwardKernel<<<Blocks(rows), kThreads, 0, stream>>>(rows, cols, p, dp);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
