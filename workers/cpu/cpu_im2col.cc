// Im2Col and Col2Im of the default convolution (cpu_im2col.h).
#include "workers/cpu/cpu_im2col.h"

#include <algorithm>
#include <cstddef>

namespace lockstep::cpu {

void Im2Col(int threads, const ConvGeometry& g, const float* x, float* cols) {
  const int oh = g.oh(), ow = g.ow();
  const size_t krow = static_cast<size_t>(g.kw) * g.c;  // one kernel row of a patch
  const size_t patch = static_cast<size_t>(g.kh) * krow;
#pragma omp parallel for num_threads(threads) collapse(2) schedule(static)
  for (int n = 0; n < g.b; ++n) {
    for (int y = 0; y < oh; ++y) {
      for (int x0 = 0; x0 < ow; ++x0) {
        float* out = cols + ((static_cast<size_t>(n) * oh + y) * ow + x0) * patch;
        // Kernel columns [j0, j1) fall inside the image: per kernel row, one contiguous
        // run of input pixels, zeros around it.
        const int left = x0 * g.stride_w - g.pad_left;  // the input column of kernel column 0
        const int j0 = std::max(0, -left), j1 = std::min(g.kw, g.w - left);
        for (int i = 0; i < g.kh; ++i, out += krow) {
          const int yy = y * g.stride_h - g.pad_top + i;
          if (yy < 0 || yy >= g.h || j0 >= j1) {
            std::fill(out, out + krow, 0.0f);
            continue;
          }
          std::fill(out, out + static_cast<size_t>(j0) * g.c, 0.0f);
          std::copy_n(x + ((static_cast<size_t>(n) * g.h + yy) * g.w + (left + j0)) * g.c,
                      static_cast<size_t>(j1 - j0) * g.c, out + static_cast<size_t>(j0) * g.c);
          std::fill(out + static_cast<size_t>(j1) * g.c, out + krow, 0.0f);
        }
      }
    }
  }
}

void Col2Im(int threads, const ConvGeometry& g, const float* dcols, float* dx) {
  const int oh = g.oh(), ow = g.ow();
  const size_t patch = static_cast<size_t>(g.kh) * g.kw * g.c;
  // Gather form: each input pixel sums the patch entries that read it, in a fixed
  // order (kernel row, then column), so threads never write the same element.
#pragma omp parallel for num_threads(threads) collapse(2) schedule(static)
  for (int n = 0; n < g.b; ++n) {
    for (int yy = 0; yy < g.h; ++yy) {
      for (int xx = 0; xx < g.w; ++xx) {
        float* out = dx + ((static_cast<size_t>(n) * g.h + yy) * g.w + xx) * g.c;
        std::fill(out, out + g.c, 0.0f);
        for (int i = 0; i < g.kh; ++i) {
          const int ty = yy + g.pad_top - i;  // y * stride_h for the output row y reading it
          if (ty < 0 || ty % g.stride_h != 0 || ty / g.stride_h >= oh) continue;
          const int y = ty / g.stride_h;
          for (int j = 0; j < g.kw; ++j) {
            const int tx = xx + g.pad_left - j;
            if (tx < 0 || tx % g.stride_w != 0 || tx / g.stride_w >= ow) continue;
            const int x = tx / g.stride_w;
            const float* in = dcols + ((static_cast<size_t>(n) * oh + y) * ow + x) * patch +
                              (static_cast<size_t>(i) * g.kw + j) * g.c;
            for (int c = 0; c < g.c; ++c) out[c] += in[c];
          }
        }
      }
    }
  }
}

}  // namespace lockstep::cpu
