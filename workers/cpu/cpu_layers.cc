// The CPU backend's kernels for the layers beyond conv and dense: activations, average and max
// pooling (see Backend for each one's contract; layer norm: cpu_layer_norm.cc). Contract:
// cpu_layers.h.
#include "workers/cpu/cpu_layers.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/layer_math.h"
#include "workers/cpu/cpu_bf16.h"
#include "workers/cpu/multiversion.h"
#include "workers/cpu/parallel_min.h"

namespace lockstep::cpu {
namespace {

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

}  // namespace lockstep::cpu
