// BilinearResizer: PIL's bilinear resize of an 8-bit image, pixel for pixel.
// Contract: bilinear_resize.h.
#include "core/data/bilinear_resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace lockstep {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // PIL's PRECISION_BITS
constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);

double Triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

inline uint8_t Clip8(int32_t v) {
  const int32_t q = v >> kPrecisionBits;
  return static_cast<uint8_t>(q < 0 ? 0 : (q > 255 ? 255 : q));
}

// One output pixel of channel count C (1 and 3 unrolled), from `count` inputs `step`
// bytes apart.
template <int C>
inline void Tap(const uint8_t* in, ptrdiff_t step, int count, const int32_t* w, int channels,
                uint8_t* out) {
  if constexpr (C > 0) {
    int32_t s[C];
    for (int c = 0; c < C; ++c) s[c] = kHalf;
    for (int k = 0; k < count; ++k) {
      const uint8_t* p = in + k * step;
      for (int c = 0; c < C; ++c) s[c] += p[c] * w[k];
    }
    for (int c = 0; c < C; ++c) out[c] = Clip8(s[c]);
  } else {
    for (int c = 0; c < channels; ++c) {
      int32_t s = kHalf;
      for (int k = 0; k < count; ++k) s += in[k * step + c] * w[k];
      out[c] = Clip8(s);
    }
  }
}

// Rows [y0, y1) of `in`, each resampled along x into `out` (rows of out_w pixels).
template <int C>
void HorizontalPass(const ImageView& in, int y0, int y1, const BilinearResizer::Taps& t,
                    uint8_t* out) {
  const int out_w = static_cast<int>(t.first.size()), ch = in.channels;
  for (int y = y0; y < y1; ++y) {
    uint8_t* o = out + static_cast<ptrdiff_t>(y - y0) * out_w * ch;
    for (int x = 0; x < out_w; ++x) {
      Tap<C>(in.at(y, t.first[x]), in.pixel_step, t.count[x], &t.weights[x * t.stride], ch,
             o + x * ch);
    }
  }
}

// acc[i] += src[i] * w over a row: the loop the vertical pass spends its time in, built
// for AVX2 too where the CPU has it (the same integer sums either way).
__attribute__((target_clones("avx2", "default"))) void MultiplyAdd(const uint8_t* src, int32_t w,
                                                                   int n, int32_t* acc) {
  for (int i = 0; i < n; ++i) acc[i] += src[i] * w;
}

__attribute__((target_clones("avx2", "default"))) void ClipRow(const int32_t* acc, int n,
                                                               uint8_t* out) {
  for (int i = 0; i < n; ++i) {
    const int32_t q = acc[i] >> kPrecisionBits;
    out[i] = static_cast<uint8_t>(q < 0 ? 0 : (q > 255 ? 255 : q));
  }
}

// Every column of `in` resampled along y into `out` (packed); `acc` is a row of sums.
void VerticalPass(const ImageView& in, const BilinearResizer::Taps& t, std::vector<int32_t>* acc,
                  uint8_t* out) {
  const int out_h = static_cast<int>(t.first.size()), w = in.width, ch = in.channels;
  const int row = w * ch;
  for (int y = 0; y < out_h; ++y) {
    const int32_t* wt = &t.weights[y * t.stride];
    const int first = t.first[y], count = t.count[y];
    uint8_t* o = out + static_cast<ptrdiff_t>(y) * row;
    if (in.packed_rows()) {
      // Channels and pixels of a row are one run of bytes: the taps' rows are added into
      // one row of sums, each in the order of the scalar sum.
      acc->assign(row, kHalf);
      for (int k = 0; k < count; ++k) MultiplyAdd(in.at(first + k, 0), wt[k], row, acc->data());
      ClipRow(acc->data(), row, o);
    } else {
      for (int x = 0; x < w; ++x) {
        Tap<0>(in.at(first, x), in.row_step, count, wt, ch, o + x * ch);
      }
    }
  }
}

}  // namespace

void BilinearResizer::ComputeTaps(int in_size, int out_size, Taps* t) {
  // Pillow's precompute_coeffs with in0 = 0, in1 = in_size, operation for operation.
  const double scale = static_cast<double>(static_cast<float>(in_size)) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  t->stride = ksize;
  t->first.resize(out_size);
  t->count.resize(out_size);
  t->weights.assign(static_cast<size_t>(out_size) * ksize, 0);
  t->raw.resize(ksize);
  const double ss = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = 0.0 + (xx + 0.5) * scale;
    double ww = 0.0;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    for (int x = 0; x < xmax; ++x) {
      const double w = Triangle((x + xmin - center + 0.5) * ss);
      t->raw[x] = w;
      ww += w;
    }
    int32_t* k = &t->weights[static_cast<size_t>(xx) * ksize];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? t->raw[x] / ww : t->raw[x];
      // normalize_coeffs_8bpc (bilinear taps are never negative).
      k[x] = static_cast<int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    t->first[xx] = xmin;
    t->count[xx] = xmax;
  }
}

void BilinearResizer::Resize(const ImageView& in, int out_h, int out_w, uint8_t* out) {
  const int ch = in.channels;
  const bool horizontal = out_w != in.width, vertical = out_h != in.height;
  if (!horizontal && !vertical) {
    for (int y = 0; y < out_h; ++y) {
      uint8_t* o = out + static_cast<ptrdiff_t>(y) * out_w * ch;
      if (in.packed_rows()) {
        std::memcpy(o, in.at(y, 0), static_cast<size_t>(out_w) * ch);
      } else {
        for (int x = 0; x < out_w; ++x) std::memcpy(o + x * ch, in.at(y, x), ch);
      }
    }
    return;
  }
  ComputeTaps(in.height, out_h, &vertical_);
  // The rows the vertical pass reads (PIL's ybox_first and ybox_last).
  const int y0 = vertical_.first.front(), y1 = vertical_.first.back() + vertical_.count.back();
  ImageView src = in;
  if (horizontal) {
    ComputeTaps(in.width, out_w, &horizontal_);
    uint8_t* dst = out;
    if (vertical) {
      mid_.resize(static_cast<size_t>(y1 - y0) * out_w * ch);
      dst = mid_.data();
    }
    // (Without a vertical pass, y0 = 0 and y1 = height: every row.)
    switch (ch) {
      case 1:
        HorizontalPass<1>(in, y0, y1, horizontal_, dst);
        break;
      case 3:
        HorizontalPass<3>(in, y0, y1, horizontal_, dst);
        break;
      default:
        HorizontalPass<0>(in, y0, y1, horizontal_, dst);
    }
    if (!vertical) return;
    src = ImageView::Packed(mid_.data(), y1 - y0, out_w, ch);
    for (int& f : vertical_.first) f -= y0;
  }
  VerticalPass(src, vertical_, &acc_, out);
}

}  // namespace lockstep
