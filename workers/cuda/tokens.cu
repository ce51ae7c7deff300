// A vision transformer's token kernels: the class token and sequence pooling, and their
// gradients. Contract: tokens.cuh.
#include "workers/cuda/launch.cuh"
#include "workers/cuda/tokens.cuh"

namespace lockstep::cuda {
namespace {

__global__ void ClassTokenKernel(int b, int t, int f, const float* cls, const float* x, float* y) {
  const size_t row = size_t(t + 1) * f, n = size_t(b) * row;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    const size_t i = e / row, j = e - i * row;  // sample, element in its rows
    y[e] = j < size_t(f) ? cls[j] : x[i * (row - f) + (j - f)];
  }
}

__global__ void ClassTokenDxKernel(int b, int t, int f, const float* dy, float* dx) {
  const size_t in = size_t(t) * f, n = size_t(b) * in;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    const size_t i = e / in;
    dx[e] = dy[e + (i + 1) * f];
  }
}

// One thread per column c: the samples' dy[i, 0, c] in sample order, in double.
__global__ void ClassTokenDclsKernel(int b, int t, int f, const float* dy, float* dcls) {
  const size_t row = size_t(t + 1) * f;
  for (size_t c = FirstIndex(); c < size_t(f); c += Stride()) {
    double sum = 0;
    for (int i = 0; i < b; ++i) sum += dy[i * row + c];
    dcls[c] = static_cast<float>(sum);
  }
}

// One thread per (sample, column): its t rows in order, in double.
__global__ void SequencePoolKernel(bool mean, int b, int t, int f, const float* x, float* y) {
  const size_t n = size_t(b) * f;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    const size_t i = e / f, c = e - i * f;
    const float* xi = x + i * size_t(t) * f + c;
    if (!mean) {
      y[e] = xi[0];
      continue;
    }
    double sum = 0;
    for (int r = 0; r < t; ++r) sum += xi[size_t(r) * f];
    y[e] = static_cast<float>(sum) / static_cast<float>(t);
  }
}

__global__ void SequencePoolBackwardKernel(bool mean, int b, int t, int f, const float* dy,
                                           float* dx) {
  const size_t in = size_t(t) * f, n = size_t(b) * in;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    const size_t i = e / in, j = e - i * in, c = j % f;
    const float g = dy[i * f + c];
    dx[e] = mean ? g / static_cast<float>(t) : (j < size_t(f) ? g : 0.0f);
  }
}

bool Empty(int b, int t, int f) { return b <= 0 || t <= 0 || f <= 0; }

}  // namespace

cudaError_t ClassToken(int b, int t, int f, const float* cls, const float* x, float* y,
                       cudaStream_t stream) {
  if (b <= 0 || t < 0 || f <= 0) return cudaSuccess;
  const size_t n = size_t(b) * (t + 1) * f;
  ClassTokenKernel<<<Blocks(n), kThreads, 0, stream>>>(b, t, f, cls, x, y);
  return cudaGetLastError();
}

cudaError_t ClassTokenBackward(int b, int t, int f, const float* dy, float* dx, float* dcls,
                               cudaStream_t stream) {
  if (b < 0 || t < 0 || f <= 0) return cudaSuccess;
  if (dx != nullptr && !Empty(b, t, f)) {
    const size_t n = size_t(b) * t * f;
    ClassTokenDxKernel<<<Blocks(n), kThreads, 0, stream>>>(b, t, f, dy, dx);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  ClassTokenDclsKernel<<<Blocks(f), kThreads, 0, stream>>>(b, t, f, dy, dcls);
  return cudaGetLastError();
}

cudaError_t SequencePool(bool mean, int b, int t, int f, const float* x, float* y,
                         cudaStream_t stream) {
  if (Empty(b, t, f)) return cudaSuccess;
  SequencePoolKernel<<<Blocks(size_t(b) * f), kThreads, 0, stream>>>(mean, b, t, f, x, y);
  return cudaGetLastError();
}

cudaError_t SequencePoolBackward(bool mean, int b, int t, int f, const float* dy, float* dx,
                                 cudaStream_t stream) {
  if (Empty(b, t, f)) return cudaSuccess;
  const size_t n = size_t(b) * t * f;
  SequencePoolBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(mean, b, t, f, dy, dx);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
