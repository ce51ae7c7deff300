#include "workers/cuda/conv.cuh"
#include "workers/cuda/launch.cuh"

namespace lockstep::cuda {
namespace {

__global__ void Im2ColKernel(int b, int h, int w, int c, int k, const float* x, float* cols) {
  const int pad = (k - 1) / 2;
  const size_t n = size_t(b) * h * w * k * k * c;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    // e indexes cols as (pixel, i, j, channel).
    const int ch = static_cast<int>(e % c);
    size_t t = e / c;
    const int j = static_cast<int>(t % k);
    t /= k;
    const int i = static_cast<int>(t % k);
    const size_t pixel = t / k;
    const int x0 = static_cast<int>(pixel % w);
    const int y = static_cast<int>((pixel / w) % h);
    const size_t image = pixel / (size_t(w) * h);
    const int yy = y + i - pad, xx = x0 + j - pad;
    const bool inside = yy >= 0 && yy < h && xx >= 0 && xx < w;
    cols[e] = inside ? x[((image * h + yy) * w + xx) * c + ch] : 0.0f;
  }
}

__global__ void Col2ImKernel(int b, int h, int w, int c, int k, const float* dcols, float* dx) {
  const int pad = (k - 1) / 2;
  const size_t patch = size_t(k) * k * c;
  const size_t n = size_t(b) * h * w * c;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    // e indexes dx as (image, yy, xx, channel); sum the patch entries that read it.
    const int ch = static_cast<int>(e % c);
    const size_t pixel = e / c;
    const int xx = static_cast<int>(pixel % w);
    const int yy = static_cast<int>((pixel / w) % h);
    const size_t image = pixel / (size_t(w) * h);
    float sum = 0.0f;
    for (int i = 0; i < k; ++i) {
      const int y = yy - i + pad;
      if (y < 0 || y >= h) continue;
      for (int j = 0; j < k; ++j) {
        const int x = xx - j + pad;
        if (x < 0 || x >= w) continue;
        sum += dcols[((image * h + y) * w + x) * patch + (size_t(i) * k + j) * c + ch];
      }
    }
    dx[e] = sum;
  }
}

}  // namespace

cudaError_t Im2Col(int b, int h, int w, int c, int k, const float* x, float* cols,
                   cudaStream_t stream) {
  const size_t n = size_t(b) * h * w * k * k * c;
  if (n == 0) return cudaSuccess;
  Im2ColKernel<<<Blocks(n), kThreads, 0, stream>>>(b, h, w, c, k, x, cols);
  return cudaGetLastError();
}

cudaError_t Col2Im(int b, int h, int w, int c, int k, const float* dcols, float* dx,
                   cudaStream_t stream) {
  const size_t n = size_t(b) * h * w * c;
  if (n == 0) return cudaSuccess;
  Col2ImKernel<<<Blocks(n), kThreads, 0, stream>>>(b, h, w, c, k, dcols, dx);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
