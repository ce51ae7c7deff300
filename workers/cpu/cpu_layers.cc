// The CPU backend's kernels for the layers beyond conv and dense: activations, average and max
// pooling, layer norm (see Backend for each one's contract). Contract: cpu_layers.h.
#include "workers/cpu/cpu_layers.h"

#include <omp.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/layer_math.h"
#include "workers/cpu/cpu_bf16.h"
#include "workers/cpu/double_column_sums.h"
#include "workers/cpu/multiversion.h"
#include "workers/cpu/parallel_min.h"

namespace lockstep::cpu {
namespace {

// Column sums (layer norm's scale and bias gradients) are taken over this many fixed row
// blocks, combined in block order: the same bits whatever the thread count.
constexpr int kBlocks = 8;

using math::Span;
using math::WindowSpan;
using math::WindowsReading;

size_t Pixel(const ConvGeometry& g, int n, int y, int x) {
  return (static_cast<size_t>(n) * g.h + y) * g.w + x;
}

// span(i, stride, pad, k, n) for i in [0, count): the windows' input spans (WindowSpan) or
// the inputs' window spans (WindowsReading) along one axis, computed once per call.
std::vector<Span> Spans(int count, int stride, int pad, int k, int n,
                        Span (*span)(int, int, int, int, int)) {
  std::vector<Span> out(count);
  for (int i = 0; i < count; ++i) out[i] = span(i, stride, pad, k, n);
  return out;
}

// Division by avg_pool's count (math::AvgDivisor), as a multiplication by its inverse
// where the count is a power of two: the same bits (both round the same exact quotient),
// without a division.
class Divisor {
 public:
  explicit Divisor(float div) : div_(div), inv_(1.0f / div) {
    int exponent;
    pow2_ = std::frexp(div, &exponent) == 0.5f;
  }
  // The window's count, from its spans.
  Divisor(Span r, Span q) : Divisor(static_cast<float>((r.end - r.begin) * (q.end - q.begin))) {}

  // out[k] = in[k] / count for k < c.
  void Row(int c, const float* in, float* out) const {
    if (pow2_) {
      for (int k = 0; k < c; ++k) out[k] = in[k] * inv_;
    } else {
      for (int k = 0; k < c; ++k) out[k] = in[k] / div_;
    }
  }
  float div() const { return div_; }
  bool pow2() const { return pow2_; }
  float inv() const { return inv_; }

 private:
  float div_, inv_;
  bool pow2_;
};

// One image of max_pool: each window's elementwise maximum over its elements in
// row-major order, a later element winning only where greater (`p > m ? p : m`, as
// XLA's reduce_window max; x86's max instruction computes exactly this).
LS_MULTIVERSION void MaxPoolImage(const ConvGeometry& g, const Span* rows, const Span* cols,
                                  const float* x, float* y) {
  const int ow = g.ow(), c = g.c;
  for (int oy = 0; oy < g.oh(); ++oy) {
    const Span r = rows[oy];
    for (int ox = 0; ox < ow; ++ox) {
      const Span q = cols[ox];
      float* out = y + (static_cast<size_t>(oy) * ow + ox) * c;
      const float* first = x + (static_cast<size_t>(r.begin) * g.w + q.begin) * c;
      if (r.end - r.begin == 2 && q.end - q.begin == 2) {  // a whole 2x2 window, in one pass
        const float* __restrict a = first;
        const float* __restrict b = first + c;
        const float* __restrict d = first + static_cast<size_t>(g.w) * c;
        const float* __restrict e = d + c;
        float* __restrict o = out;
        for (int k = 0; k < c; ++k) {
          float m = b[k] > a[k] ? b[k] : a[k];
          m = d[k] > m ? d[k] : m;
          o[k] = e[k] > m ? e[k] : m;
        }
        continue;
      }
      std::copy_n(first, c, out);
      for (int yy = r.begin; yy < r.end; ++yy) {
        for (int xx = q.begin; xx < q.end; ++xx) {
          const float* p = x + (static_cast<size_t>(yy) * g.w + xx) * c;
          for (int k = 0; k < c; ++k) out[k] = p[k] > out[k] ? p[k] : out[k];
        }
      }
    }
  }
}

// A whole 2x2 window of max_pool's gradient, c channels: x0 and x1 its two rows of
// inputs (2c floats each), o0 and o1 those of dx, d its dy. Branch-free, so that it
// vectorizes: the argmax is 3 where element 3 beats the maximum of the first three, else
// 2 where element 2 beats that of the first two, ...; t is dy until an element took it.
LS_MULTIVERSION void MaxPool2x2Backward(int c, const float* __restrict x0,
                                        const float* __restrict x1, const float* __restrict d,
                                        float* __restrict o0, float* __restrict o1) {
  for (int k = 0; k < c; ++k) {
    const float a = x0[k], b = x0[c + k], e = x1[k], f = x1[c + k];
    const float m1 = b > a ? b : a;
    const float m2 = e > m1 ? e : m1;
    float t = d[k];
    o1[c + k] += f > m2 ? t : 0.0f;
    t = f > m2 ? 0.0f : t;
    o1[k] += e > m1 ? t : 0.0f;
    t = e > m1 ? 0.0f : t;
    o0[c + k] += b > a ? t : 0.0f;
    t = b > a ? 0.0f : t;
    o0[k] += t;
  }
}

// One image of max_pool's gradient: each window's dy goes to the first element (in
// row-major order) that holds its maximum, the windows visited in output order. Written
// as a masked add over the window, `dx += (arg == p ? dy : 0)`, so that it vectorizes
// across channels: the same bits as adding dy to the arg-th element alone, since an
// element of dx is never -0 (it starts at +0, and a sum is -0 only when both terms are)
// and adding +0 to anything else changes nothing. `best` and `arg` hold c elements.
LS_MULTIVERSION void MaxPoolBackwardImage(const ConvGeometry& g, const Span* rows, const Span* cols,
                                          const float* x, const float* dy, float* dx, float* best,
                                          int* arg) {
  const int ow = g.ow(), c = g.c;
  std::fill(dx, dx + static_cast<size_t>(g.h) * g.w * c, 0.0f);
  for (int oy = 0; oy < g.oh(); ++oy) {
    const Span r = rows[oy];
    for (int ox = 0; ox < ow; ++ox) {
      const Span q = cols[ox];
      const float* d = dy + (static_cast<size_t>(oy) * ow + ox) * c;
      if (r.end - r.begin == 2 && q.end - q.begin == 2) {  // a whole 2x2 window, in one pass
        const size_t at = (static_cast<size_t>(r.begin) * g.w + q.begin) * c;
        const size_t below = static_cast<size_t>(g.w) * c;
        MaxPool2x2Backward(c, x + at, x + at + below, d, dx + at, dx + at + below);
        continue;
      }
      int p = 0;
      for (int yy = r.begin; yy < r.end; ++yy) {
        for (int xx = q.begin; xx < q.end; ++xx, ++p) {
          const float* v = x + (static_cast<size_t>(yy) * g.w + xx) * c;
          if (p == 0) {
            for (int k = 0; k < c; ++k) best[k] = v[k], arg[k] = 0;
            continue;
          }
          for (int k = 0; k < c; ++k) {
            const bool greater = v[k] > best[k];
            best[k] = greater ? v[k] : best[k];
            arg[k] = greater ? p : arg[k];
          }
        }
      }
      p = 0;
      for (int yy = r.begin; yy < r.end; ++yy) {
        for (int xx = q.begin; xx < q.end; ++xx, ++p) {
          float* o = dx + (static_cast<size_t>(yy) * g.w + xx) * c;
          for (int k = 0; k < c; ++k) o[k] += arg[k] == p ? d[k] : 0.0f;
        }
      }
    }
  }
}

// y[i] = a(x[i]) for i in [begin, end): one loop per activation, so that each inlines its
// formula (math::Tanh included) and vectorizes.
template <Activation A>
__attribute__((always_inline)) inline void ActivateLoop(const float* x, float* y, size_t begin,
                                                        size_t end) {
  for (size_t i = begin; i < end; ++i) y[i] = math::Activate(A, x[i]);
}

template <Activation A>
__attribute__((always_inline)) inline void DerivativeLoop(const float* x, float* dy, size_t begin,
                                                          size_t end) {
  for (size_t i = begin; i < end; ++i) dy[i] = dy[i] * math::ActivationDerivative(A, x[i]);
}

LS_MULTIVERSION void ActivateRange(Activation a, const float* x, float* y, size_t begin,
                                   size_t end) {
  switch (a) {
    case Activation::kGeluTanh:
      return ActivateLoop<Activation::kGeluTanh>(x, y, begin, end);
    case Activation::kGeluErf:
      return ActivateLoop<Activation::kGeluErf>(x, y, begin, end);
    case Activation::kTanh:
      return ActivateLoop<Activation::kTanh>(x, y, begin, end);
    case Activation::kSigmoid:
      return ActivateLoop<Activation::kSigmoid>(x, y, begin, end);
    case Activation::kSilu:
      return ActivateLoop<Activation::kSilu>(x, y, begin, end);
  }
}

LS_MULTIVERSION void ActivateBackwardRange(Activation a, const float* x, float* dy, size_t begin,
                                           size_t end) {
  switch (a) {
    case Activation::kGeluTanh:
      return DerivativeLoop<Activation::kGeluTanh>(x, dy, begin, end);
    case Activation::kGeluErf:
      return DerivativeLoop<Activation::kGeluErf>(x, dy, begin, end);
    case Activation::kTanh:
      return DerivativeLoop<Activation::kTanh>(x, dy, begin, end);
    case Activation::kSigmoid:
      return DerivativeLoop<Activation::kSigmoid>(x, dy, begin, end);
    case Activation::kSilu:
      return DerivativeLoop<Activation::kSilu>(x, dy, begin, end);
  }
}

// The derivative of activation A (math::ActivationDerivative) at every bfloat16 input.
template <Activation A>
const float* DerivativeTable() {
  static const std::vector<float> table =
      Bf16Table([](float x) { return math::ActivationDerivative(A, x); });
  return table.data();
}

const float* DerivativeTable(Activation a) {
  switch (a) {
    case Activation::kGeluTanh:
      return DerivativeTable<Activation::kGeluTanh>();
    case Activation::kGeluErf:
      return DerivativeTable<Activation::kGeluErf>();
    case Activation::kTanh:
      return DerivativeTable<Activation::kTanh>();
    case Activation::kSigmoid:
      return DerivativeTable<Activation::kSigmoid>();
    case Activation::kSilu:
      return DerivativeTable<Activation::kSilu>();
  }
  return nullptr;
}

LS_MULTIVERSION void ScaleRange(const float* factor, float* dy, size_t n) {
  for (size_t i = 0; i < n; ++i) dy[i] = dy[i] * factor[i];
}

// ActivateBackwardRange in blocks: where a block of x holds bfloat16 values (a bfloat16
// layer's input), its derivatives are looked up (the same bits as the formula's).
void ActivateBackwardBlocks(Activation a, const float* x, float* dy, size_t begin, size_t end) {
  float factor[kBf16Block];
  for (size_t lo = begin; lo < end; lo += kBf16Block) {
    const size_t hi = std::min(end, lo + kBf16Block);
    if (HoldsBf16(x + lo, hi - lo)) {
      LookUpBf16(DerivativeTable(a), x + lo, factor, hi - lo);
      ScaleRange(factor, dy + lo, hi - lo);
    } else {
      ActivateBackwardRange(a, x, dy, lo, hi);
    }
  }
}

}  // namespace

void Activate(int threads, Activation a, size_t n, const float* x, float* y) {
  if (n <= kParallelMin) return ActivateRange(a, x, y, 0, n);
#pragma omp parallel num_threads(threads)
  {
    const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    ActivateRange(a, x, y, n * t / nt, n * (t + 1) / nt);
  }
}

void ActivateBackward(int threads, Activation a, size_t n, const float* x, float* dy) {
  ParallelFor(threads, n, [&](size_t b, size_t e) { ActivateBackwardBlocks(a, x, dy, b, e); });
}

void AvgPool(int threads, const ConvGeometry& g, bool count_include_pad, const float* x, float* y) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  const std::vector<Span> rows = Spans(oh, g.stride_h, g.pad_top, g.kh, g.h, WindowSpan);
  const std::vector<Span> cols = Spans(ow, g.stride_w, g.pad_left, g.kw, g.w, WindowSpan);
  const Divisor whole(static_cast<float>(g.kh * g.kw));
#pragma omp parallel for num_threads(threads) collapse(2) schedule(static)
  for (int n = 0; n < g.b; ++n) {
    for (int oy = 0; oy < oh; ++oy) {
      const Span r = rows[oy];
      for (int ox = 0; ox < ow; ++ox) {
        const Span q = cols[ox];
        float* out = y + ((static_cast<size_t>(n) * oh + oy) * ow + ox) * c;
        const Divisor div = count_include_pad ? whole : Divisor(r, q);
        if (g.kh == 2 && g.kw == 2 && r.end - r.begin == 2 && q.end - q.begin == 2) {
          // A whole 2x2 window (the CNN's pools) in one pass: the same sums.
          const float* p = x + Pixel(g, n, r.begin, q.begin) * c;
          const float* s = p + static_cast<size_t>(g.w) * c;
          if (div.pow2()) {
            const float inv = div.inv();
            for (int k = 0; k < c; ++k) out[k] = (((p[k] + p[c + k]) + s[k]) + s[c + k]) * inv;
          } else {
            for (int k = 0; k < c; ++k) out[k] = ((p[k] + p[c + k]) + s[k]) + s[c + k];
            div.Row(c, out, out);
          }
          continue;
        }
        // The window's elements in row-major order: ((a + b) + c) + d for 2x2.
        bool first = true;
        for (int yy = r.begin; yy < r.end; ++yy) {
          for (int xx = q.begin; xx < q.end; ++xx) {
            const float* p = x + Pixel(g, n, yy, xx) * c;
            if (first) {
              std::copy_n(p, c, out);
              first = false;
            } else {
              for (int k = 0; k < c; ++k) out[k] += p[k];
            }
          }
        }
        div.Row(c, out, out);
      }
    }
  }
}

void AvgPoolBackward(int threads, const ConvGeometry& g, bool count_include_pad, const float* dy,
                     float* dx) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
  const std::vector<Span> reading_rows =
      Spans(g.h, g.stride_h, g.pad_top, g.kh, oh, WindowsReading);
  const std::vector<Span> reading_cols =
      Spans(g.w, g.stride_w, g.pad_left, g.kw, ow, WindowsReading);
  const std::vector<Span> rows = Spans(oh, g.stride_h, g.pad_top, g.kh, g.h, WindowSpan);
  const std::vector<Span> cols = Spans(ow, g.stride_w, g.pad_left, g.kw, g.w, WindowSpan);
  const Divisor whole(static_cast<float>(g.kh * g.kw));
  // Gather form: each input pixel sums dy / count over the windows reading it, in output
  // order, so threads never write the same element.
#pragma omp parallel for num_threads(threads) collapse(2) schedule(static)
  for (int n = 0; n < g.b; ++n) {
    for (int yy = 0; yy < g.h; ++yy) {
      const Span r = reading_rows[yy];
      for (int xx = 0; xx < g.w; ++xx) {
        const Span q = reading_cols[xx];
        float* out = dx + Pixel(g, n, yy, xx) * c;
        if (r.end - r.begin == 1 && q.end - q.begin == 1) {  // one window: no sum
          const float* d = dy + ((static_cast<size_t>(n) * oh + r.begin) * ow + q.begin) * c;
          (count_include_pad ? whole : Divisor(rows[r.begin], cols[q.begin])).Row(c, d, out);
          continue;
        }
        bool first = true;
        for (int oy = r.begin; oy < r.end; ++oy) {
          for (int ox = q.begin; ox < q.end; ++ox) {
            const float* d = dy + ((static_cast<size_t>(n) * oh + oy) * ow + ox) * c;
            const float div = count_include_pad ? whole.div() : Divisor(rows[oy], cols[ox]).div();
            if (first) {
              for (int k = 0; k < c; ++k) out[k] = d[k] / div;
              first = false;
            } else {
              for (int k = 0; k < c; ++k) out[k] += d[k] / div;
            }
          }
        }
        if (first) std::fill(out, out + c, 0.0f);  // read by no window
      }
    }
  }
}

void MaxPool(int threads, const ConvGeometry& g, const float* x, float* y) {
  const std::vector<Span> rows = Spans(g.oh(), g.stride_h, g.pad_top, g.kh, g.h, WindowSpan);
  const std::vector<Span> cols = Spans(g.ow(), g.stride_w, g.pad_left, g.kw, g.w, WindowSpan);
  const size_t image = static_cast<size_t>(g.h) * g.w * g.c;
  const size_t out = static_cast<size_t>(g.oh()) * g.ow() * g.c;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int n = 0; n < g.b; ++n) {
    MaxPoolImage(g, rows.data(), cols.data(), x + n * image, y + n * out);
  }
}

void MaxPoolBackward(int threads, const ConvGeometry& g, const float* x, const float* dy,
                     float* dx) {
  const std::vector<Span> rows = Spans(g.oh(), g.stride_h, g.pad_top, g.kh, g.h, WindowSpan);
  const std::vector<Span> cols = Spans(g.ow(), g.stride_w, g.pad_left, g.kw, g.w, WindowSpan);
  const size_t image = static_cast<size_t>(g.h) * g.w * g.c;
  const size_t out = static_cast<size_t>(g.oh()) * g.ow() * g.c;
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> best(g.c);
    std::vector<int> arg(g.c);
#pragma omp for schedule(static)
    for (int n = 0; n < g.b; ++n) {
      MaxPoolBackwardImage(g, rows.data(), cols.data(), x + n * image, dy + n * out, dx + n * image,
                           best.data(), arg.data());
    }
  }
}

namespace {

// Rows layer-normed at once: each row's in-order sums (math::LayerNormRow's) interleave
// with the others', so that their adds' latencies overlap; the same bits as row by row.
constexpr int kNormRows = 4;

template <int R>
LS_MULTIVERSION void LayerNormRows(int cols, float epsilon, const float* x, const float* scale,
                                   const float* bias, float* y, float* mean, float* rstd) {
  double sum[R] = {}, sum_sq[R] = {};
  for (int c = 0; c < cols; ++c) {
    for (int i = 0; i < R; ++i) math::LayerNormAdd(x[int64_t{i} * cols + c], &sum[i], &sum_sq[i]);
  }
  for (int i = 0; i < R; ++i) {
    const int64_t at = int64_t{i} * cols;
    math::LayerNormFinishRow(cols, epsilon, sum[i], sum_sq[i], x + at, scale, bias, y + at,
                             mean + i, rstd + i);
  }
}

template <int R>
LS_MULTIVERSION void LayerNormDxRows(int cols, const float* x, const float* scale,
                                     const float* mean, const float* rstd, const float* dy,
                                     float* dx) {
  float sum_g[R] = {}, sum_gx[R] = {};
  for (int c = 0; c < cols; ++c) {
    for (int i = 0; i < R; ++i) {
      const int64_t at = int64_t{i} * cols + c;
      math::LayerNormDxAdd(c, x[at], scale, mean[i], rstd[i], dy[at], &sum_g[i], &sum_gx[i]);
    }
  }
  for (int i = 0; i < R; ++i) {
    const int64_t at = int64_t{i} * cols;
    math::LayerNormDxFinishRow(cols, x + at, scale, mean[i], rstd[i], sum_g[i], sum_gx[i], dy + at,
                               dx + at);
  }
}

#if defined(LS_AVX512)
#pragma GCC diagnostic push  // GCC 12 flags its own intrinsics' _mm512_undefined_*
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Eight rows at once in AVX-512, a row a lane: LayerNormRows' and LayerNormDxRows'
// operations per row in the same order (each lane's sums in column order), so the same
// bits, at a vector operation per 8 values where those kernels spend a scalar one.
constexpr int kLaneRows = 8;

// The 8 x 8 floats at p (rows ld apart), transposed: r[j] = column j, a row a lane.
LS_AVX512 inline void LoadColumns8(const float* p, int64_t ld, __m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(p + i * ld);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// LayerNormRows<8>: the sums (math::LayerNormAdd) 8 columns at a time, then each row's
// mean and rstd (math::LayerNormFinishRow's: fmax(0, v) is max_pd(v, 0), a NaN giving 0 in
// both) and output.
LS_AVX512 void LayerNormRowsAvx512(int cols, float epsilon, const float* x, const float* scale,
                                   const float* bias, float* y, float* mean, float* rstd) {
  __m512d sum = _mm512_setzero_pd(), sum_sq = _mm512_setzero_pd();
  int c = 0;
  for (; c + 8 <= cols; c += 8) {
    __m256 col[8];
    LoadColumns8(x + c, cols, col);
    for (int j = 0; j < 8; ++j) {
      const __m512d v = _mm512_cvtps_pd(col[j]);
      sum = _mm512_add_pd(sum, v);
      sum_sq = _mm512_add_pd(sum_sq, _mm512_mul_pd(v, v));
    }
  }
  if (c < cols) {  // the last columns one at a time
    double s[kLaneRows], q[kLaneRows];
    _mm512_storeu_pd(s, sum);
    _mm512_storeu_pd(q, sum_sq);
    for (int i = 0; i < kLaneRows; ++i) {
      for (int k = c; k < cols; ++k) math::LayerNormAdd(x[int64_t{i} * cols + k], &s[i], &q[i]);
    }
    sum = _mm512_loadu_pd(s);
    sum_sq = _mm512_loadu_pd(q);
  }
  const __m512d n = _mm512_set1_pd(cols), m = _mm512_div_pd(sum, n);
  const __m512d var = _mm512_max_pd(_mm512_sub_pd(_mm512_div_pd(sum_sq, n), _mm512_mul_pd(m, m)),
                                    _mm512_setzero_pd());
  _mm256_storeu_ps(mean, _mm512_cvtpd_ps(m));
  _mm256_storeu_ps(
      rstd,
      _mm256_div_ps(_mm256_set1_ps(1.0f),
                    _mm256_sqrt_ps(_mm256_add_ps(_mm512_cvtpd_ps(var), _mm256_set1_ps(epsilon)))));
  for (int i = 0; i < kLaneRows; ++i) {
    const int64_t at = int64_t{i} * cols;
    math::LayerNormApplyRow(cols, x + at, scale, bias, mean[i], rstd[i], y + at);
  }
}

// LayerNormDxRows<8> likewise (math::LayerNormDxAdd's sums 8 columns at a time).
LS_AVX512 void LayerNormDxRowsAvx512(int cols, const float* x, const float* scale,
                                     const float* mean, const float* rstd, const float* dy,
                                     float* dx) {
  const __m256 m = _mm256_loadu_ps(mean), rs = _mm256_loadu_ps(rstd);
  __m256 sum_g = _mm256_setzero_ps(), sum_gx = _mm256_setzero_ps();
  int c = 0;
  for (; c + 8 <= cols; c += 8) {
    __m256 xc[8], gc[8];
    LoadColumns8(x + c, cols, xc);
    LoadColumns8(dy + c, cols, gc);
    for (int j = 0; j < 8; ++j) {
      const __m256 g =
          scale != nullptr ? _mm256_mul_ps(gc[j], _mm256_set1_ps(scale[c + j])) : gc[j];
      sum_g = _mm256_add_ps(sum_g, g);
      sum_gx = _mm256_add_ps(sum_gx, _mm256_mul_ps(g, _mm256_mul_ps(_mm256_sub_ps(xc[j], m), rs)));
    }
  }
  float sg[kLaneRows], sgx[kLaneRows];
  _mm256_storeu_ps(sg, sum_g);
  _mm256_storeu_ps(sgx, sum_gx);
  for (int i = 0; i < kLaneRows; ++i) {
    const int64_t at = int64_t{i} * cols;
    for (int k = c; k < cols; ++k) {
      math::LayerNormDxAdd(k, x[at + k], scale, mean[i], rstd[i], dy[at + k], &sg[i], &sgx[i]);
    }
    math::LayerNormDxFinishRow(cols, x + at, scale, mean[i], rstd[i], sg[i], sgx[i], dy + at,
                               dx + at);
  }
}
#pragma GCC diagnostic pop
#endif

// Columns [c0, c0 + 8 * kVecs) of LayerNormParamSums, each column's two sums held in
// registers over the rows (in memory they are a store and a load per row, each waiting on
// the last).
template <int kVecs>
__attribute__((always_inline)) inline void LayerNormParamColumns(int r0, int r1, int cols, int c0,
                                                                 const float* x, const float* mean,
                                                                 const float* rstd, const float* dy,
                                                                 double* ps, double* pb) {
  D8 s[kVecs] = {}, b[kVecs] = {};
  for (int r = r0; r < r1; ++r) {
    const size_t at = static_cast<size_t>(r) * cols + c0;
    float xhat[8 * kVecs];
    for (int j = 0; j < 8 * kVecs; ++j) xhat[j] = (x[at + j] - mean[r]) * rstd[r];
    for (int k = 0; k < kVecs; ++k) {
      F8 fx, fd;
      std::memcpy(&fx, xhat + 8 * k, sizeof(fx));
      std::memcpy(&fd, dy + at + 8 * k, sizeof(fd));
      const D8 d = __builtin_convertvector(fd, D8);
      s[k] += d * __builtin_convertvector(fx, D8);
      b[k] += d;
    }
  }
  std::memcpy(ps + c0, s, sizeof(s));
  std::memcpy(pb + c0, b, sizeof(b));
}

// ps[c] = the column sums of dy * xhat over rows [r0, r1) and pb[c] those of dy, top to
// bottom in double (each product exact): blocks of 16 and 8 columns, then one at a time.
LS_MULTIVERSION void LayerNormParamSums(int r0, int r1, int cols, const float* x, const float* mean,
                                        const float* rstd, const float* dy, double* ps,
                                        double* pb) {
  int c0 = 0;
  for (; c0 + 16 <= cols; c0 += 16) {
    LayerNormParamColumns<2>(r0, r1, cols, c0, x, mean, rstd, dy, ps, pb);
  }
  for (; c0 + 8 <= cols; c0 += 8) {
    LayerNormParamColumns<1>(r0, r1, cols, c0, x, mean, rstd, dy, ps, pb);
  }
  for (; c0 < cols; ++c0) {
    double s = 0, b = 0;
    for (int r = r0; r < r1; ++r) {
      const size_t at = static_cast<size_t>(r) * cols + c0;
      s += double{dy[at]} * ((x[at] - mean[r]) * rstd[r]);
      b += dy[at];
    }
    ps[c0] = s;
    pb[c0] = b;
  }
}

}  // namespace

void LayerNorm(int threads, int rows, int cols, float epsilon, const float* x, const float* scale,
               const float* bias, float* y, float* mean, float* rstd) {
  const bool lanes = HasAvx512() && cols >= 8;  // rows kLaneRows at a time in AVX-512
  const int per = lanes ? kLaneRows : kNormRows, groups = rows / per;
#pragma omp parallel for num_threads(threads) \
    schedule(static) if (static_cast <size_t>(rows) * cols > kParallelMin)
  for (int g = 0; g < groups; ++g) {
    const int64_t r = int64_t{g} * per, at = r * cols;
    if (lanes) {
      LayerNormRowsAvx512(cols, epsilon, x + at, scale, bias, y + at, mean + r, rstd + r);
    } else {
      LayerNormRows<kNormRows>(cols, epsilon, x + at, scale, bias, y + at, mean + r, rstd + r);
    }
  }
  for (int64_t r = int64_t{groups} * per; r < rows; ++r) {
    LayerNormRows<1>(cols, epsilon, x + r * cols, scale, bias, y + r * cols, mean + r, rstd + r);
  }
}

void LayerNormBackward(int threads, int rows, int cols, const float* x, const float* scale,
                       const float* mean, const float* rstd, const float* dy, float* dx,
                       float* dscale, float* dbias) {
  const bool parallel = static_cast<size_t>(rows) * cols > kParallelMin;
  if (dx != nullptr) {
    const bool lanes = HasAvx512() && cols >= 8;  // rows kLaneRows at a time in AVX-512
    const int per = lanes ? kLaneRows : kNormRows, groups = rows / per;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int g = 0; g < groups; ++g) {
      const int64_t r = int64_t{g} * per, at = r * cols;
      if (lanes) {
        LayerNormDxRowsAvx512(cols, x + at, scale, mean + r, rstd + r, dy + at, dx + at);
      } else {
        LayerNormDxRows<kNormRows>(cols, x + at, scale, mean + r, rstd + r, dy + at, dx + at);
      }
    }
    for (int64_t r = int64_t{groups} * per; r < rows; ++r) {
      const int64_t at = r * cols;
      LayerNormDxRows<1>(cols, x + at, scale, mean + r, rstd + r, dy + at, dx + at);
    }
  }
  if (dscale == nullptr && dbias == nullptr) return;
  // dscale = column sums of dy * xhat, dbias = column sums of dy, in double (each product
  // exact), each rounded once; the CUDA kernel adds in the same order.
  std::vector<double> partial(2 * static_cast<size_t>(kBlocks) * cols);
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
  for (int blk = 0; blk < kBlocks; ++blk) {
    double* ps = partial.data() + 2 * static_cast<size_t>(blk) * cols;
    LayerNormParamSums(static_cast<int>(int64_t{rows} * blk / kBlocks),
                       static_cast<int>(int64_t{rows} * (blk + 1) / kBlocks), cols, x, mean, rstd,
                       dy, ps, ps + cols);
  }
  for (int c = 0; c < cols; ++c) {
    double total_s = 0.0, total_b = 0.0;
    for (int blk = 0; blk < kBlocks; ++blk) {
      total_s += partial[2 * static_cast<size_t>(blk) * cols + c];
      total_b += partial[2 * static_cast<size_t>(blk) * cols + cols + c];
    }
    if (dscale != nullptr) dscale[c] = static_cast<float>(total_s);
    if (dbias != nullptr) dbias[c] = static_cast<float>(total_b);
  }
}

}  // namespace lockstep::cpu
