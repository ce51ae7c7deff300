// Average and max pooling on NHWC activations, any window, strides and padding (see
// Backend::AvgPool and MaxPool), and their backward passes. Contract: pool.cuh.
#include "core/bfloat16.h"
#include "core/layer_math.h"
#include "workers/cuda/launch.cuh"
#include "workers/cuda/pool.cuh"

namespace lockstep::cuda {
namespace {

using math::Span;
using math::WindowSpan;
using math::WindowsReading;

// An element index of an NHWC array of (b, h, w, c), split.
struct Index {
  size_t image;
  int y, x, ch;
};

__device__ Index Split(size_t e, int h, int w, int c) {
  Index i;
  i.ch = static_cast<int>(e % c);
  const size_t pixel = e / c;
  i.x = static_cast<int>(pixel % w);
  i.y = static_cast<int>((pixel / w) % h);
  i.image = pixel / (size_t(w) * h);
  return i;
}

__device__ size_t At(const ConvGeometry& g, size_t image, int y, int x, int ch) {
  return ((image * g.h + y) * g.w + x) * g.c + ch;
}

// The first (row-major) element of window (oy, ox) holding its maximum, for channel ch.
__device__ size_t ArgMax(const ConvGeometry& g, const float* x, size_t image, int oy, int ox,
                         int ch) {
  const Span r = WindowSpan(oy, g.stride_h, g.pad_top, g.kh, g.h);
  const Span q = WindowSpan(ox, g.stride_w, g.pad_left, g.kw, g.w);
  size_t arg = At(g, image, r.begin, q.begin, ch);
  float best = x[arg];
  for (int yy = r.begin; yy < r.end; ++yy) {
    for (int xx = q.begin; xx < q.end; ++xx) {
      const size_t at = At(g, image, yy, xx, ch);
      if (x[at] > best) best = x[at], arg = at;
    }
  }
  return arg;
}

__global__ void AvgPoolKernel(ConvGeometry g, int oh, int ow, bool count_include_pad,
                              const float* x, float* y) {
  const size_t n = size_t(g.b) * oh * ow * g.c;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    const Index o = Split(e, oh, ow, g.c);
    const Span r = WindowSpan(o.y, g.stride_h, g.pad_top, g.kh, g.h);
    const Span q = WindowSpan(o.x, g.stride_w, g.pad_left, g.kw, g.w);
    float sum = x[At(g, o.image, r.begin, q.begin, o.ch)];
    bool first = true;
    for (int yy = r.begin; yy < r.end; ++yy) {
      for (int xx = q.begin; xx < q.end; ++xx) {
        if (!first) sum += x[At(g, o.image, yy, xx, o.ch)];
        first = false;
      }
    }
    y[e] = sum / math::AvgDivisor(g, count_include_pad, o.y, o.x);
  }
}

__global__ void AvgPoolBackwardKernel(ConvGeometry g, int oh, int ow, bool count_include_pad,
                                      const float* dy, float* dx) {
  const size_t n = size_t(g.b) * g.h * g.w * g.c;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    const Index i = Split(e, g.h, g.w, g.c);
    const Span r = WindowsReading(i.y, g.stride_h, g.pad_top, g.kh, oh);
    const Span q = WindowsReading(i.x, g.stride_w, g.pad_left, g.kw, ow);
    float sum = 0.0f;
    bool first = true;
    for (int oy = r.begin; oy < r.end; ++oy) {
      for (int ox = q.begin; ox < q.end; ++ox) {
        const float share = dy[((i.image * oh + oy) * ow + ox) * g.c + i.ch] /
                            math::AvgDivisor(g, count_include_pad, oy, ox);
        sum = first ? share : sum + share;
        first = false;
      }
    }
    dx[e] = sum;
  }
}

// nn.avg_pool in bfloat16, as the CPU backend's (cpu_bf16.cc, where XLA's order is
// explained): the window summed from 0 with every add rounded, in row-major order, or
// column-major where the width's padding is all after; then divided (and rounded with
// count_include_pad; without it Flax's division is float32).
__global__ void AvgPoolBf16Kernel(ConvGeometry g, int oh, int ow, bool count_include_pad,
                                  const float* x, float* y) {
  const size_t n = size_t(g.b) * oh * ow * g.c;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    const Index o = Split(e, oh, ow, g.c);
    const Span r = WindowSpan(o.y, g.stride_h, g.pad_top, g.kh, g.h);
    const Span q = WindowSpan(o.x, g.stride_w, g.pad_left, g.kw, g.w);
    float sum = 0.0f;
    if (g.pad_left == 0 && g.pad_right > 0) {
      for (int xx = q.begin; xx < q.end; ++xx) {
        for (int yy = r.begin; yy < r.end; ++yy) {
          sum = RoundBf16(sum + x[At(g, o.image, yy, xx, o.ch)]);
        }
      }
    } else {
      for (int yy = r.begin; yy < r.end; ++yy) {
        for (int xx = q.begin; xx < q.end; ++xx) {
          sum = RoundBf16(sum + x[At(g, o.image, yy, xx, o.ch)]);
        }
      }
    }
    const float div = math::AvgDivisor(g, count_include_pad, o.y, o.x);
    y[e] = count_include_pad ? RoundBf16(sum / div) : sum / div;
  }
}

__global__ void MaxPoolKernel(ConvGeometry g, int oh, int ow, const float* x, float* y) {
  const size_t n = size_t(g.b) * oh * ow * g.c;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    const Index o = Split(e, oh, ow, g.c);
    y[e] = x[ArgMax(g, x, o.image, o.y, o.x, o.ch)];
  }
}

__global__ void MaxPoolBackwardKernel(ConvGeometry g, int oh, int ow, const float* x,
                                      const float* dy, float* dx) {
  const size_t n = size_t(g.b) * g.h * g.w * g.c;
  for (size_t e = FirstIndex(); e < n; e += Stride()) {
    const Index i = Split(e, g.h, g.w, g.c);
    const Span r = WindowsReading(i.y, g.stride_h, g.pad_top, g.kh, oh);
    const Span q = WindowsReading(i.x, g.stride_w, g.pad_left, g.kw, ow);
    float sum = 0.0f;
    for (int oy = r.begin; oy < r.end; ++oy) {
      for (int ox = q.begin; ox < q.end; ++ox) {
        if (ArgMax(g, x, i.image, oy, ox, i.ch) == e) {
          sum += dy[((i.image * oh + oy) * ow + ox) * g.c + i.ch];
        }
      }
    }
    dx[e] = sum;
  }
}

}  // namespace

cudaError_t AvgPool(const ConvGeometry& g, bool count_include_pad, const float* x, float* y,
                    cudaStream_t stream) {
  const int oh = g.oh(), ow = g.ow();
  const size_t n = size_t(g.b) * oh * ow * g.c;
  if (n == 0) return cudaSuccess;
  AvgPoolKernel<<<Blocks(n), kThreads, 0, stream>>>(g, oh, ow, count_include_pad, x, y);
  return cudaGetLastError();
}

cudaError_t AvgPoolBackward(const ConvGeometry& g, bool count_include_pad, const float* dy,
                            float* dx, cudaStream_t stream) {
  const size_t n = size_t(g.b) * g.h * g.w * g.c;
  if (n == 0) return cudaSuccess;
  AvgPoolBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(g, g.oh(), g.ow(), count_include_pad,
                                                            dy, dx);
  return cudaGetLastError();
}

cudaError_t AvgPoolBf16(const ConvGeometry& g, bool count_include_pad, const float* x, float* y,
                        cudaStream_t stream) {
  const int oh = g.oh(), ow = g.ow();
  const size_t n = size_t(g.b) * oh * ow * g.c;
  if (n == 0) return cudaSuccess;
  AvgPoolBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(g, oh, ow, count_include_pad, x, y);
  return cudaGetLastError();
}

cudaError_t MaxPool(const ConvGeometry& g, const float* x, float* y, cudaStream_t stream) {
  const int oh = g.oh(), ow = g.ow();
  const size_t n = size_t(g.b) * oh * ow * g.c;
  if (n == 0) return cudaSuccess;
  MaxPoolKernel<<<Blocks(n), kThreads, 0, stream>>>(g, oh, ow, x, y);
  return cudaGetLastError();
}

cudaError_t MaxPoolBackward(const ConvGeometry& g, const float* x, const float* dy, float* dx,
                            cudaStream_t stream) {
  const size_t n = size_t(g.b) * g.h * g.w * g.c;
  if (n == 0) return cudaSuccess;
  MaxPoolBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(g, g.oh(), g.ow(), x, dy, dx);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
