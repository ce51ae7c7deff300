// The CPU backend's LayerNorm (Backend::LayerNorm, LayerNormBackward): rows in groups whose
// in-order sums interleave, eight at a time in AVX-512 where the CPU has it, the params'
// gradients over fixed row blocks. Contract: cpu_layer_norm.h.
#include "workers/cpu/cpu_layer_norm.h"

#include <omp.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstring>
#include <vector>

#include "core/layer_math.h"
#include "workers/cpu/double_column_sums.h"
#include "workers/cpu/multiversion.h"
#include "workers/cpu/parallel_min.h"

namespace lockstep::cpu {
namespace {

// Column sums (layer norm's scale and bias gradients) are taken over this many fixed row
// blocks, combined in block order: the same bits whatever the thread count.
constexpr int kBlocks = 8;

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
