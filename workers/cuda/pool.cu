#include "workers/cuda/launch.cuh"
#include "workers/cuda/pool.cuh"

namespace lockstep::cuda {
namespace {

__global__ void AvgPoolKernel(int b, int h, int w, int c, const float* x, float* y) {
  const int oh = h / 2, ow = w / 2;
  const size_t n = size_t(b) * oh * ow * c;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    const int k = static_cast<int>(e % c);
    const size_t pixel = e / c;
    const int j = static_cast<int>(pixel % ow);
    const int i = static_cast<int>((pixel / ow) % oh);
    const size_t image = pixel / (size_t(ow) * oh);
    const float* p = x + ((image * h + 2 * i) * w + 2 * j) * c + k;
    const float* q = p + size_t(w) * c;
    y[e] = (((p[0] + p[c]) + q[0]) + q[c]) / 4.0f;
  }
}

__global__ void AvgPoolBackwardKernel(int b, int h, int w, int c, const float* dy, float* dx) {
  const int oh = h / 2, ow = w / 2;
  const size_t n = size_t(b) * h * w * c;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    const int k = static_cast<int>(e % c);
    const size_t pixel = e / c;
    const int j = static_cast<int>(pixel % w);
    const int i = static_cast<int>((pixel / w) % h);
    const size_t image = pixel / (size_t(w) * h);
    if (i / 2 >= oh || j / 2 >= ow) {
      dx[e] = 0.0f;
    } else {
      dx[e] = dy[((image * oh + i / 2) * ow + j / 2) * c + k] / 4.0f;
    }
  }
}

}  // namespace

cudaError_t AvgPool(int b, int h, int w, int c, const float* x, float* y, cudaStream_t stream) {
  const size_t n = size_t(b) * (h / 2) * (w / 2) * c;
  if (n == 0) return cudaSuccess;
  AvgPoolKernel<<<Blocks(n), kThreads, 0, stream>>>(b, h, w, c, x, y);
  return cudaGetLastError();
}

cudaError_t AvgPoolBackward(int b, int h, int w, int c, const float* dy, float* dx,
                            cudaStream_t stream) {
  const size_t n = size_t(b) * h * w * c;
  if (n == 0) return cudaSuccess;
  AvgPoolBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(b, h, w, c, dy, dx);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
