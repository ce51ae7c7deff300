// The elementwise bfloat16 kernels of mixed precision. Contract: bf16.cuh.
#include "core/bfloat16.h"
#include "core/layer_math.h"
#include "workers/cuda/bf16.cuh"
#include "workers/cuda/launch.cuh"

namespace lockstep::cuda {
namespace {

// A float32 holding a bfloat16 value as that Bf16 (its upper half: exact).
__device__ inline Bf16 Twin(float y) { return Bf16{static_cast<uint16_t>(FloatBits(y) >> 16)}; }

__global__ void ToBf16Kernel(size_t n, const float* x, Bf16* y) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) y[i].bits = Bf16Bits(x[i]);
}

__global__ void AddRowsBf16Kernel(size_t n, int cols, const float* x, const float* bias, float* y,
                                  Bf16* y16) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) {
    const float v =
        bias == nullptr ? RoundBf16(x[i]) : RoundBf16(RoundBf16(x[i]) + RoundBf16(bias[i % cols]));
    y[i] = v;
    if (y16 != nullptr) y16[i] = Twin(v);
  }
}

__global__ void ActivateBf16Kernel(Activation a, size_t n, const float* x, float* y, Bf16* y16) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) {
    const float v = math::ActivateBf16(a, x[i]);
    y[i] = v;
    if (y16 != nullptr) y16[i] = Twin(v);
  }
}

__global__ void FromBf16Kernel(size_t n, const Bf16* x, float* y) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) y[i] = Bf16Float(x[i].bits);
}

__global__ void ReluBf16Kernel(size_t n, float* x, Bf16* x16) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) {
    const float v = x[i] > 0.0f ? x[i] : 0.0f;
    x[i] = v;
    x16[i] = Twin(v);
  }
}

}  // namespace

cudaError_t ToBf16(size_t n, const float* x, Bf16* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ToBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(n, x, y);
  return cudaGetLastError();
}

cudaError_t FromBf16(size_t n, const Bf16* x, float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FromBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(n, x, y);
  return cudaGetLastError();
}

cudaError_t AddRowsBf16(int rows, int cols, const float* x, const float* bias, float* y, Bf16* y16,
                        cudaStream_t stream) {
  const size_t n = size_t(rows) * cols;
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  AddRowsBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(n, cols, x, bias, y, y16);
  return cudaGetLastError();
}

cudaError_t ActivateBf16(Activation a, size_t n, const float* x, float* y, Bf16* y16,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ActivateBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(a, n, x, y, y16);
  return cudaGetLastError();
}

cudaError_t ReluBf16(size_t n, float* x, Bf16* x16, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ReluBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(n, x, x16);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
