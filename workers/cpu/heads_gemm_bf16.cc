// HeadsGemmBf16 (heads_gemm_bf16.h): per product, op(b) packed into pairs along k (row p
// of the pack holds (b[2p][j], b[2p+1][j]) as one 32-bit word per column j, the layout
// vdpbf16ps reads), op(a)'s pairs read in place (or packed the same way where a is
// transposed), then tiles of up to 4 rows x 64 columns of c accumulated in registers.
#include "workers/cpu/heads_gemm_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "workers/cpu/bf16_vectors.h"
#include "workers/cpu/multiversion.h"

#if defined(LS_AVX512_BF16)
#include <immintrin.h>
#endif

namespace lockstep::cpu {

#if defined(LS_AVX512_BF16)
#pragma GCC diagnostic push  // GCC 12 flags its own intrinsics' _mm512_undefined_*
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace {

constexpr int kLanes = 16;  // float32 lanes of a vector
constexpr int kTileRows = 4, kTileVectors = 4;

int RoundUp(int n) { return (n + kLanes - 1) / kLanes * kLanes; }

// out[j] = r0[j] | r1[j] << 16 for j < n (r1 null: 0), zeros up to RoundUp(n).
LS_AVX512_BF16 void Interleave(const Bf16* r0, const Bf16* r1, int n, uint32_t* out) {
  for (int j = 0; j < n; j += kLanes) {
    const __mmask16 mask = FirstLanes(n - j);
    __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, r0 + j));
    if (r1 != nullptr) {
      const __m512i hi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, r1 + j));
      w = _mm512_or_si512(w, _mm512_slli_epi32(hi, 16));
    }
    _mm512_storeu_si512(out + j, w);
  }
}

// Words [0, words) (<= 16) of 16 rows (row r: the 32-bit words at b + r * ldb, b in
// bfloat16s), transposed: out[p * ld + r] = word p of row r. Four rounds of shuffles.
LS_AVX512_BF16 void Transpose16(const Bf16* b, int ldb, int words, uint32_t* out, int ld) {
  const __mmask16 mask = FirstLanes(words);
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_maskz_loadu_epi32(mask, b + size_t(i) * ldb);
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: rows 2i and 2i + 1 interleaved
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + c], lane L: word 4L + c of rows 4i .. 4i + 3
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // the 4 x 4 lanes of r[c], r[4 + c], ... transposed
    const __m512i u0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44);
    const __m512i u1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xee);
    const __m512i u2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
    const __m512i u3 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xee);
    const __m512i w[4] = {_mm512_shuffle_i32x4(u0, u2, 0x88), _mm512_shuffle_i32x4(u0, u2, 0xdd),
                          _mm512_shuffle_i32x4(u1, u3, 0x88), _mm512_shuffle_i32x4(u1, u3, 0xdd)};
    for (int l = 0; l < 4; ++l) {
      if (4 * l + c < words) _mm512_storeu_si512(out + size_t(4 * l + c) * ld, w[l]);
    }
  }
}

// op(b) (k x n) as ceil(k / 2) rows of pairs, RoundUp(n) columns each (those past n
// unwritten but for zeros from Interleave: only lanes whose sums are not stored read them).
LS_AVX512_BF16 void PackB(bool tb, int n, int k, const Bf16* b, int ldb, uint32_t* out) {
  const int ld = RoundUp(n);
  if (tb) {  // pair p of column j: b[j * ldb + 2p] and the next element, one 32-bit word
    const int words = k / 2;
    int j = 0;
    for (; j + kLanes <= n; j += kLanes) {
      for (int p = 0; p < words; p += kLanes) {
        Transpose16(b + size_t(j) * ldb + 2 * p, ldb, std::min(kLanes, words - p),
                    out + size_t(p) * ld + j, ld);
      }
    }
    for (int p = 0; p < words; ++p) {
      uint32_t* row = out + size_t(p) * ld;
      for (int jj = j; jj < n; ++jj) std::memcpy(row + jj, b + size_t(jj) * ldb + 2 * p, 4);
    }
    if (k % 2 != 0) {  // the last element alone (a word would read past b's last row)
      uint32_t* row = out + size_t(words) * ld;
      for (int jj = 0; jj < n; ++jj) row[jj] = b[size_t(jj) * ldb + k - 1].bits;
    }
    return;
  }
  for (int p = 0; 2 * p < k; ++p) {
    Interleave(b + size_t(2 * p) * ldb, 2 * p + 1 < k ? b + size_t(2 * p + 1) * ldb : nullptr, n,
               out + size_t(p) * ld);
  }
}

// op(a)'s pairs: the word of row i, pair p at bytes + i * row + p * pair; `odd` (k odd, a
// read in place): the last pair's element of row i, odd[i * odd_ld], its partner 0.
struct PairsA {
  const char* bytes;
  int64_t row, pair;
  int pairs;
  const Bf16* odd = nullptr;
  int64_t odd_ld = 0;
};

// acc[r][v] += row i0 + r's pair (words[r]) times packed b's pair row brow, columns
// j0 + 16 v onwards.
template <int R, int V>
LS_AVX512_BF16 inline __attribute__((always_inline)) void Step(__m512 (&acc)[R][V],
                                                               const uint32_t (&words)[R],
                                                               const uint32_t* brow) {
  __m512i bv[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) bv[v] = _mm512_loadu_si512(brow + kLanes * v);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m512i av = _mm512_set1_epi32(static_cast<int>(words[r]));
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)av, (__m512bh)bv[v]);
    }
  }
}

// c[i0 .. i0 + R) x [j0 .. j0 + 16 V) (columns < n) from packed b (ld columns per pair row).
template <int R, int V>
LS_AVX512_BF16 inline __attribute__((always_inline)) void Tile(const PairsA& a, int i0,
                                                               const uint32_t* pb, int ld, int j0,
                                                               int n, float alpha, float beta,
                                                               float* c, int ldc) {
  __m512 acc[R][V];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  uint32_t words[R];
  for (int p = 0; p < a.pairs; ++p) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      std::memcpy(&words[r], a.bytes + (i0 + r) * a.row + p * a.pair, sizeof(uint32_t));
    }
    Step<R, V>(acc, words, pb + size_t(p) * ld + j0);
  }
  if (a.odd != nullptr) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) words[r] = a.odd[(i0 + r) * a.odd_ld].bits;
    Step<R, V>(acc, words, pb + size_t(a.pairs) * ld + j0);
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const int j = j0 + kLanes * v;
      const __mmask16 mask = FirstLanes(n - j);
      float* out = c + size_t(i0 + r) * ldc + j;
      __m512 y = alpha == 1.0f ? acc[r][v] : _mm512_mul_ps(va, acc[r][v]);
      if (beta != 0.0f) y = _mm512_add_ps(y, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(mask, out)));
      _mm512_mask_storeu_ps(out, mask, y);
    }
  }
}

// Rows [0, m) of c's columns [j0, j0 + 16 V): tiles of 4 rows, then the rest.
template <int V>
LS_AVX512_BF16 void Rows(const PairsA& a, int m, const uint32_t* pb, int ld, int j0, int n,
                         float alpha, float beta, float* c, int ldc) {
  int i = 0;
  for (; i + kTileRows <= m; i += kTileRows) {
    Tile<kTileRows, V>(a, i, pb, ld, j0, n, alpha, beta, c, ldc);
  }
  switch (m - i) {
    case 1:
      return Tile<1, V>(a, i, pb, ld, j0, n, alpha, beta, c, ldc);
    case 2:
      return Tile<2, V>(a, i, pb, ld, j0, n, alpha, beta, c, ldc);
    case 3:
      return Tile<3, V>(a, i, pb, ld, j0, n, alpha, beta, c, ldc);
  }
}
using RowsFn = void (*)(const PairsA&, int, const uint32_t*, int, int, int, float, float, float*,
                        int);
constexpr RowsFn kRows[kTileVectors] = {Rows<1>, Rows<2>, Rows<3>, Rows<4>};

// Column j of c from a^T's pairs (pa: a row of RoundUp(m) words per pair) and packed b's
// column j, 16 rows per vector: for the few columns past a multiple of 16, where a vector
// of columns would be mostly padding. The same sums as Tile's.
LS_AVX512_BF16 void Column(const uint32_t* pa, int pairs, const uint32_t* pb, int ld, int j, int m,
                           float alpha, float beta, float* c, int ldc) {
  const int lda = RoundUp(m);
  for (int i0 = 0; i0 < m; i0 += kLanes) {
    __m512 acc = _mm512_setzero_ps();
    for (int p = 0; p < pairs; ++p) {
      const __m512i av = _mm512_loadu_si512(pa + size_t(p) * lda + i0);
      const __m512i bv = _mm512_set1_epi32(static_cast<int>(pb[size_t(p) * ld + j]));
      acc = _mm512_dpbf16_ps(acc, (__m512bh)av, (__m512bh)bv);
    }
    float sums[kLanes];
    _mm512_storeu_ps(sums, acc);
    for (int r = 0; r < std::min(kLanes, m - i0); ++r) {
      float& y = c[size_t(i0 + r) * ldc + j];
      const float v = alpha == 1.0f ? sums[r] : alpha * sums[r];
      y = beta != 0.0f ? v + beta * y : v;
    }
  }
}

// One product; pb and pa: scratch for the packed b and a^T.
LS_AVX512_BF16 void Product(bool ta, bool tb, int m, int n, int k, float alpha, const Bf16* a,
                            int lda, const Bf16* b, int ldb, float beta, float* c, int ldc,
                            uint32_t* pb, uint32_t* pa) {
  PackB(tb, n, k, b, ldb, pb);
  // Columns past a multiple of 16 by Column where that halves their work or better.
  const int tail = n % kLanes, blocks = (m + kLanes - 1) / kLanes;
  const int columns = n >= kLanes && 2 * tail * blocks <= m ? n - tail : n;
  const int pairs_total = (k + 1) / 2;
  if (ta || columns < n) PackB(!ta, m, k, a, lda, pa);  // a^T's pairs, as b's
  PairsA pairs{reinterpret_cast<const char*>(a),
               int64_t{2} * lda,
               4,
               k / 2,
               k % 2 != 0 ? a + (k - 1) : nullptr,
               lda};
  if (ta) pairs = {reinterpret_cast<const char*>(pa), 4, int64_t{4} * RoundUp(m), pairs_total};
  const int ld = RoundUp(n);
  for (int j0 = 0; j0 < columns; j0 += kLanes * kTileVectors) {
    const int vectors = std::min(kTileVectors, (columns - j0 + kLanes - 1) / kLanes);
    kRows[vectors - 1](pairs, m, pb, ld, j0, columns, alpha, beta, c, ldc);
  }
  for (int j = columns; j < n; ++j) Column(pa, pairs_total, pb, ld, j, m, alpha, beta, c, ldc);
}

struct Products {
  bool ta, tb;
  int m, n, k;
  float alpha, beta;
  Backend::HeadsOperand<const Bf16> a, b;
  Backend::HeadsOperand<float> c;
  int heads;
};

LS_AVX512_BF16 void ProductRange(const Products& s, int begin, int end) {
  const size_t pairs = (s.k + 1) / 2;
  std::vector<uint32_t> pb(pairs * RoundUp(s.n)), pa(pairs * RoundUp(s.m));
  for (int q = begin; q < end; ++q) {
    const int i = q / s.heads, j = q % s.heads;
    Product(s.ta, s.tb, s.m, s.n, s.k, s.alpha, s.a.p + i * s.a.stride + j * s.a.head, s.a.ld,
            s.b.p + i * s.b.stride + j * s.b.head, s.b.ld, s.beta,
            s.c.p + i * s.c.stride + j * s.c.head, s.c.ld, pb.data(), pa.data());
  }
}

}  // namespace
#pragma GCC diagnostic pop

bool HeadsGemmBf16Takes(int m, int n, int k) {
  return HasAvx512Bf16() && m <= kHeadsGemmMaxDim && n <= kHeadsGemmMaxDim && k <= kHeadsGemmMaxDim;
}

bool HeadsGemmBf16Preferred(int m, int n, int k) {
  static const bool amx = __builtin_cpu_supports("amx-bf16");
  return !amx && HeadsGemmBf16Takes(m, n, k);
}

void HeadsGemmBf16(int threads, bool ta, bool tb, int m, int n, int k, float alpha,
                   Backend::HeadsOperand<const Bf16> a, Backend::HeadsOperand<const Bf16> b,
                   float beta, Backend::HeadsOperand<float> c, int count, int heads) {
  const Products s{ta, tb, m, n, k, alpha, beta, a, b, c, heads};
  const int products = count * heads;
  if (threads <= 1 || products <= 1) return ProductRange(s, 0, products);
#pragma omp parallel num_threads(std::min(threads, products))
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    ProductRange(s, products * t / nt, products * (t + 1) / nt);
  }
}

#else  // no AVX-512 BF16 build: oneDNN runs every shape

bool HeadsGemmBf16Takes(int, int, int) { return false; }

bool HeadsGemmBf16Preferred(int, int, int) { return false; }

void HeadsGemmBf16(int, bool, bool, int, int, int, float, Backend::HeadsOperand<const Bf16>,
                   Backend::HeadsOperand<const Bf16>, float, Backend::HeadsOperand<float>, int,
                   int) {}

#endif

}  // namespace lockstep::cpu
