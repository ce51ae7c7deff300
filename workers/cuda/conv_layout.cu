// A convolution kernel between Lockstep's HWIO layout and cuDNN's KRSC.
// Contract: conv_layout.cuh.
#include "workers/cuda/conv_layout.cuh"
#include "workers/cuda/launch.cuh"

namespace lockstep::cuda {
namespace {

// Over the HWIO index j = (rsi) * f + k, rsi = (r * kw + s) * c + i: the KRSC index is
// k * (kh * kw * c) + rsi.
template <bool kToKrsc>
__global__ void TransposeKernel(size_t n, int f, const float* from, float* to) {
  const size_t rsc = n / f;
  for (size_t j = FirstIndex(); j < n; j += Stride()) {
    const size_t k = j % f, rsi = j / f;
    if (kToKrsc) {
      to[k * rsc + rsi] = from[j];
    } else {
      to[j] = from[k * rsc + rsi];
    }
  }
}

}  // namespace

cudaError_t HwioToKrsc(int kh, int kw, int c, int f, const float* hwio, float* krsc,
                       cudaStream_t stream) {
  const size_t n = size_t(kh) * kw * c * f;
  if (n == 0) return cudaSuccess;
  TransposeKernel<true><<<Blocks(n), kThreads, 0, stream>>>(n, f, hwio, krsc);
  return cudaGetLastError();
}

cudaError_t KrscToHwio(int kh, int kw, int c, int f, const float* krsc, float* hwio,
                       cudaStream_t stream) {
  const size_t n = size_t(kh) * kw * c * f;
  if (n == 0) return cudaSuccess;
  TransposeKernel<false><<<Blocks(n), kThreads, 0, stream>>>(n, f, krsc, hwio);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
