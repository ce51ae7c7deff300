// A convolution kernel between Lockstep's HWIO layout and cuDNN's KRSC.
// Contract: conv_layout.cuh.
#include "workers/cuda/conv_layout.cuh"
#include "workers/cuda/launch.cuh"

namespace lockstep::cuda {
namespace {

// Over the HWIO index j = (rsi) * f + k, rsi = (r * kw + s) * c + i: the KRSC index is
// k * (kh * kw * c) + rsi.
template <bool kToKrsc, typename T>
__global__ void TransposeKernel(size_t n, int f, const T* from, T* to) {
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

template <bool kToKrsc, typename T>
cudaError_t Transpose(int kh, int kw, int c, int f, const T* from, T* to, cudaStream_t stream) {
  const size_t n = size_t(kh) * kw * c * f;
  if (n == 0) return cudaSuccess;
  TransposeKernel<kToKrsc><<<Blocks(n), kThreads, 0, stream>>>(n, f, from, to);
  return cudaGetLastError();
}

}  // namespace

cudaError_t HwioToKrsc(int kh, int kw, int c, int f, const float* hwio, float* krsc,
                       cudaStream_t stream) {
  return Transpose<true>(kh, kw, c, f, hwio, krsc, stream);
}

cudaError_t HwioToKrsc(int kh, int kw, int c, int f, const Bf16* hwio, Bf16* krsc,
                       cudaStream_t stream) {
  return Transpose<true>(kh, kw, c, f, hwio, krsc, stream);
}

cudaError_t KrscToHwio(int kh, int kw, int c, int f, const float* krsc, float* hwio,
                       cudaStream_t stream) {
  return Transpose<false>(kh, kw, c, f, krsc, hwio, stream);
}

}  // namespace lockstep::cuda
