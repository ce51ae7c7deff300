// The CPU backend's kernels for the sequence layers: embedding lookups and their gradient,
// broadcast adds, strided batches of GEMMs and the attention softmax (see Backend for each one's
// contract). Contract: cpu_sequence.h.
#include "workers/cpu/cpu_sequence.h"

#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "workers/cpu/parallel_min.h"

namespace lockstep::cpu {

void Embed(int threads, int n, int features, const float* ids, const float* table, float* out) {
#pragma omp parallel for num_threads(threads) \
    schedule(static) if (static_cast <size_t>(n) * features > kParallelMin)
  for (int i = 0; i < n; ++i) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    std::memcpy(out + int64_t{i} * features, table + id * features, features * sizeof(float));
  }
}

void EmbedBackward(int threads, int n, int features, int num_embeddings, const float* ids,
                   const float* dy, float* dtable) {
  std::memset(dtable, 0, sizeof(float) * num_embeddings * static_cast<size_t>(features));
  // Thread j owns the table rows id % threads == j and walks dy in order: each row's sum
  // is in row order whatever the thread count.
  const int team = static_cast<size_t>(n) * features > kParallelMin ? threads : 1;
#pragma omp parallel num_threads(team)
  {
    const int j = omp_get_thread_num(), count = omp_get_num_threads();
    for (int i = 0; i < n; ++i) {
      const int64_t id = static_cast<int64_t>(ids[i]);
      if (id % count != j) continue;
      float* row = dtable + id * features;
      const float* g = dy + int64_t{i} * features;
      for (int f = 0; f < features; ++f) row[f] += g[f];
    }
  }
}

void AddRows(int threads, int rows, int cols, const float* x, const float* bias, float* y) {
#pragma omp parallel for num_threads(threads) \
    schedule(static) if (static_cast <size_t>(rows) * cols > kParallelMin)
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + int64_t{r} * cols;
    float* yr = y + int64_t{r} * cols;
    for (int c = 0; c < cols; ++c) yr[c] = xr[c] + bias[c];
  }
}

void GemmStrided(int threads, bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                 int lda, int64_t stride_a, const float* b, int ldb, int64_t stride_b, float beta,
                 float* c, int ldc, int64_t stride_c, int count) {
  // OpenBLAS runs single-threaded when the caller's ICV is 1 or inside an active parallel
  // region (see cpu_gemm.cc): both hold here.
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
#pragma omp parallel for num_threads(threads) schedule(static) if (count > 1)
  for (int i = 0; i < count; ++i) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta, c + i * stride_c,
                ldc);
  }
}

void AttentionSoftmax(int threads, int rows, int t, bool causal, float* s) {
  const float lowest = std::numeric_limits<float>::lowest();  // jnp.finfo(float32).min
#pragma omp parallel for num_threads(threads) \
    schedule(static) if (static_cast <size_t>(rows) * t > kParallelMin)
  for (int r = 0; r < rows; ++r) {
    float* x = s + int64_t{r} * t;
    // Positions after the query's own are finfo.min: their exp(min - max) is 0 (but where
    // the row's max is min itself), so they take no exp and add nothing to the sum.
    const int n = causal ? r % t + 1 : t;
    float mx = x[0];
    for (int k = 1; k < n; ++k) mx = std::max(mx, x[k]);
    if (n < t) mx = std::max(mx, lowest);
    const float masked = std::exp(lowest - mx);
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) {
      x[k] = std::exp(x[k] - mx);
      sum += x[k];
    }
    for (int k = n; k < t; ++k) {
      x[k] = masked;
      sum += masked;
    }
    for (int k = 0; k < t; ++k) x[k] = x[k] / sum;
  }
}

void SoftmaxBackward(int threads, int rows, int cols, const float* p, float* dp) {
#pragma omp parallel for num_threads(threads) \
    schedule(static) if (static_cast <size_t>(rows) * cols > kParallelMin)
  for (int r = 0; r < rows; ++r) {
    const float* y = p + int64_t{r} * cols;
    float* g = dp + int64_t{r} * cols;
    // dy = y * (g - sum(g * y)): where g is nearly level across the row, g - dot cancels,
    // and a float32 dot's rounding is what remains (attention's query and key gradients
    // were twice XLA's error against float64 on a random model of golden_random.py). In
    // double, each product exact and g - dot rounded once, the error is g's own.
    double dot = 0.0;
    for (int c = 0; c < cols; ++c) dot += double{g[c]} * y[c];
    for (int c = 0; c < cols; ++c) g[c] = y[c] * static_cast<float>(g[c] - dot);
  }
}

void MaskedScale(int threads, int rows, int cols, const uint8_t* mask, float keep, const float* x,
                 float* y) {
  // multiplier = keep.astype(float32) / float32(keep_prob), then x * multiplier.
  const float scale = 1.0f / keep;
#pragma omp parallel for num_threads(threads) \
    schedule(static) if (static_cast <size_t>(rows) * cols > kParallelMin)
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + int64_t{r} * cols;
    float* yr = y + int64_t{r} * cols;
    for (int c = 0; c < cols; ++c) yr[c] = xr[c] * (mask[c] ? scale : 0.0f);
  }
}

void ClassToken(int threads, int b, int t, int f, const float* cls, const float* x, float* y) {
  const size_t in = size_t(t) * f, out = in + f;
#pragma omp parallel for num_threads(threads) schedule(static) if (b * out > kParallelMin)
  for (int i = 0; i < b; ++i) {
    std::memcpy(y + i * out, cls, f * sizeof(float));
    std::memcpy(y + i * out + f, x + i * in, in * sizeof(float));
  }
}

void ClassTokenBackward(int threads, int b, int t, int f, const float* dy, float* dx, float* dcls) {
  const size_t in = size_t(t) * f, out = in + f;
  if (dx != nullptr) {
#pragma omp parallel for num_threads(threads) schedule(static) if (b * in > kParallelMin)
    for (int i = 0; i < b; ++i) std::memcpy(dx + i * in, dy + i * out + f, in * sizeof(float));
  }
  // One column per iteration, its samples in order: the same bits whatever the threads.
#pragma omp parallel for num_threads(threads) schedule(static) if (size_t(b) * f > kParallelMin)
  for (int c = 0; c < f; ++c) {
    double sum = 0;
    for (int i = 0; i < b; ++i) sum += dy[i * out + c];
    dcls[c] = static_cast<float>(sum);
  }
}

void SequencePool(int threads, bool mean, int b, int t, int f, const float* x, float* y) {
  const size_t in = size_t(t) * f;
  const float count = static_cast<float>(t);
#pragma omp parallel for num_threads(threads) schedule(static) if (b * in > kParallelMin)
  for (int i = 0; i < b; ++i) {
    const float* xi = x + i * in;
    float* yi = y + size_t(i) * f;
    if (!mean) {
      std::memcpy(yi, xi, f * sizeof(float));
      continue;
    }
    for (int c = 0; c < f; ++c) {
      double sum = 0;
      for (int r = 0; r < t; ++r) sum += xi[size_t(r) * f + c];
      yi[c] = static_cast<float>(sum) / count;
    }
  }
}

void SequencePoolBackward(int threads, bool mean, int b, int t, int f, const float* dy, float* dx) {
  const size_t in = size_t(t) * f;
  const float count = static_cast<float>(t);
#pragma omp parallel for num_threads(threads) schedule(static) if (b * in > kParallelMin)
  for (int i = 0; i < b; ++i) {
    const float* g = dy + size_t(i) * f;
    float* d = dx + i * in;
    if (!mean) {
      std::memcpy(d, g, f * sizeof(float));
      std::memset(d + f, 0, (in - f) * sizeof(float));
      continue;
    }
    for (int c = 0; c < f; ++c) d[c] = g[c] / count;
    for (int r = 1; r < t; ++r) std::memcpy(d + size_t(r) * f, d, f * sizeof(float));
  }
}

}  // namespace lockstep::cpu
