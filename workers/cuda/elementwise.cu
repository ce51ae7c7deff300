// Elementwise kernels: relu and the other activations, forward and backward, and pmean's division.
// Contract: elementwise.cuh.
#include "core/layer_math.h"
#include "workers/cuda/elementwise.cuh"
#include "workers/cuda/launch.cuh"

namespace lockstep::cuda {
namespace {

__global__ void ReluKernel(size_t n, float* x) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void ReluBackwardKernel(size_t n, const float* y, float* dy) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void ActivateKernel(Activation a, size_t n, const float* x, float* y) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) y[i] = math::Activate(a, x[i]);
}

__global__ void ActivateBackwardKernel(Activation a, size_t n, const float* x, float* dy) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) {
    dy[i] = dy[i] * math::ActivationDerivative(a, x[i]);
  }
}

__global__ void AddKernel(size_t n, const float* a, const float* b, float* y) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) y[i] = a[i] + b[i];
}

__global__ void DivideKernel(size_t n, float d, float* x) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) x[i] /= d;
}

}  // namespace

cudaError_t Relu(size_t n, float* x, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ReluKernel<<<Blocks(n), kThreads, 0, stream>>>(n, x);
  return cudaGetLastError();
}

cudaError_t ReluBackward(size_t n, const float* y, float* dy, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ReluBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(n, y, dy);
  return cudaGetLastError();
}

cudaError_t Activate(Activation a, size_t n, const float* x, float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ActivateKernel<<<Blocks(n), kThreads, 0, stream>>>(a, n, x, y);
  return cudaGetLastError();
}

cudaError_t ActivateBackward(Activation a, size_t n, const float* x, float* dy,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ActivateBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(a, n, x, dy);
  return cudaGetLastError();
}

cudaError_t Add(size_t n, const float* a, const float* b, float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  AddKernel<<<Blocks(n), kThreads, 0, stream>>>(n, a, b, y);
  return cudaGetLastError();
}

cudaError_t Divide(size_t n, float d, float* x, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  DivideKernel<<<Blocks(n), kThreads, 0, stream>>>(n, d, x);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
