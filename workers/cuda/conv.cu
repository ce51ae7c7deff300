// Convolution as im2col + GEMM: the patch gather and its adjoint, on NHWC activations, for any
// kernel, strides and padding (see Backend::Im2Col). Contract: conv.cuh.
#include "workers/cuda/conv.cuh"
#include "workers/cuda/launch.cuh"

namespace lockstep::cuda {
namespace {

// oh and ow come from the host (ConvGeometry's methods are host code). T: float, or Bf16
// (whose T{} is +0 too).
template <typename T>
__global__ void Im2ColKernel(ConvGeometry g, int oh, int ow, const T* x, T* cols) {
  const size_t n = size_t(g.b) * oh * ow * g.kh * g.kw * g.c;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    // e indexes cols as (pixel, i, j, channel).
    const int ch = static_cast<int>(e % g.c);
    size_t t = e / g.c;
    const int j = static_cast<int>(t % g.kw);
    t /= g.kw;
    const int i = static_cast<int>(t % g.kh);
    const size_t pixel = t / g.kh;
    const int x0 = static_cast<int>(pixel % ow);
    const int y = static_cast<int>((pixel / ow) % oh);
    const size_t image = pixel / (size_t(ow) * oh);
    const int yy = y * g.stride_h - g.pad_top + i, xx = x0 * g.stride_w - g.pad_left + j;
    const bool inside = yy >= 0 && yy < g.h && xx >= 0 && xx < g.w;
    cols[e] = inside ? x[((image * g.h + yy) * g.w + xx) * g.c + ch] : T{};
  }
}

__global__ void Col2ImKernel(ConvGeometry g, int oh, int ow, const float* dcols, float* dx) {
  const size_t patch = size_t(g.kh) * g.kw * g.c;
  const size_t n = size_t(g.b) * g.h * g.w * g.c;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    // e indexes dx as (image, yy, xx, channel); sum the patch entries that read it.
    const int ch = static_cast<int>(e % g.c);
    const size_t pixel = e / g.c;
    const int xx = static_cast<int>(pixel % g.w);
    const int yy = static_cast<int>((pixel / g.w) % g.h);
    const size_t image = pixel / (size_t(g.w) * g.h);
    float sum = 0.0f;
    for (int i = 0; i < g.kh; ++i) {
      const int ty = yy + g.pad_top - i;
      if (ty < 0 || ty % g.stride_h != 0 || ty / g.stride_h >= oh) continue;
      const int y = ty / g.stride_h;
      for (int j = 0; j < g.kw; ++j) {
        const int tx = xx + g.pad_left - j;
        if (tx < 0 || tx % g.stride_w != 0 || tx / g.stride_w >= ow) continue;
        const int x = tx / g.stride_w;
        sum += dcols[((image * oh + y) * ow + x) * patch + (size_t(i) * g.kw + j) * g.c + ch];
      }
    }
    dx[e] = sum;
  }
}

template <typename T>
cudaError_t LaunchIm2Col(const ConvGeometry& g, const T* x, T* cols, cudaStream_t stream) {
  const int oh = g.oh(), ow = g.ow();
  const size_t n = size_t(g.b) * oh * ow * g.kh * g.kw * g.c;
  if (n == 0) return cudaSuccess;
  Im2ColKernel<T><<<Blocks(n), kThreads, 0, stream>>>(g, oh, ow, x, cols);
  return cudaGetLastError();
}

}  // namespace

cudaError_t Im2Col(const ConvGeometry& g, const float* x, float* cols, cudaStream_t stream) {
  return LaunchIm2Col(g, x, cols, stream);
}

cudaError_t Im2Col(const ConvGeometry& g, const Bf16* x, Bf16* cols, cudaStream_t stream) {
  return LaunchIm2Col(g, x, cols, stream);
}

cudaError_t Col2Im(const ConvGeometry& g, const float* dcols, float* dx, cudaStream_t stream) {
  const size_t n = size_t(g.b) * g.h * g.w * g.c;
  if (n == 0) return cudaSuccess;
  Col2ImKernel<<<Blocks(n), kThreads, 0, stream>>>(g, g.oh(), g.ow(), dcols, dx);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
