#include "workers/cpu/cpu_batch_norm.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "core/batch_norm_math.h"

namespace lockstep::cpu {
namespace {

// Loops below this many elements run on one thread: fork/join would cost more.
constexpr size_t kParallelMin = 1 << 15;

bool Parallel(int rows, int cols) { return static_cast<size_t>(rows) * cols > kParallelMin; }

// Row block `blk`'s rows [begin, end) of kBatchNormBlocks.
int BlockRow(int rows, int blk) { return static_cast<int>(int64_t{rows} * blk / kBatchNormBlocks); }

// out[k * cols + c] = the column sums of f(r, c, k) for k in {0, 1}, over kBatchNormBlocks
// row blocks, each summed in row order from 0 and added in block order from 0.
// `partial` holds BatchNormPartials(cols) floats.
template <typename F>
void ColumnSums2(int threads, int rows, int cols, F f, float* partial, float* out) {
  const size_t width = 2 * static_cast<size_t>(cols);
#pragma omp parallel for num_threads(threads) schedule(static) if (Parallel(rows, cols))
  for (int blk = 0; blk < kBatchNormBlocks; ++blk) {
    float* p = partial + blk * width;
    std::fill_n(p, width, 0.0f);
    for (int r = BlockRow(rows, blk); r < BlockRow(rows, blk + 1); ++r) {
      for (int c = 0; c < cols; ++c) {
        float a, b;
        f(r, c, a, b);
        p[c] += a;
        p[cols + c] += b;
      }
    }
  }
  for (size_t k = 0; k < width; ++k) out[k] = 0.0f;
  for (int blk = 0; blk < kBatchNormBlocks; ++blk) {
    const float* p = partial + blk * width;
    for (size_t k = 0; k < width; ++k) out[k] += p[k];
  }
}

}  // namespace

void BatchNormMoments(int threads, int rows, int cols, const float* x, float* partials,
                      float* moments) {
  ColumnSums2(
      threads, rows, cols,
      [&](int r, int c, float& a, float& b) {
        const float v = x[static_cast<size_t>(r) * cols + c];
        a = v;
        b = v * v;
      },
      partials, moments);
  const float n = static_cast<float>(rows);
  for (int k = 0; k < 2 * cols; ++k) moments[k] = moments[k] / n;
}

void BatchNormVariance(int cols, const float* moments, float* var) {
  for (int c = 0; c < cols; ++c) var[c] = math::BatchNormVariance(moments[c], moments[cols + c]);
}

void BatchNormApply(int threads, int rows, int cols, float epsilon, const float* x,
                    const float* mean, const float* var, const float* scale, const float* bias,
                    float* y) {
  std::vector<float> mul(cols);
  for (int c = 0; c < cols; ++c) mul[c] = math::BatchNormMul(var[c], epsilon, scale, c);
#pragma omp parallel for num_threads(threads) schedule(static) if (Parallel(rows, cols))
  for (int r = 0; r < rows; ++r) {
    const size_t at = static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c)
      y[at + c] = math::BatchNormY(x[at + c], mean[c], mul[c], bias, c);
  }
}

void BatchNormUpdateStats(int cols, float momentum, float one_minus_momentum, const float* mean,
                          const float* var, float* ra_mean, float* ra_var) {
  for (int c = 0; c < cols; ++c) {
    ra_mean[c] = momentum * ra_mean[c] + one_minus_momentum * mean[c];
    ra_var[c] = momentum * ra_var[c] + one_minus_momentum * var[c];
  }
}

void BatchNormBackwardReduce(int threads, int rows, int cols, float epsilon, const float* x,
                             const float* dy, const float* mean, const float* var, float* partials,
                             float* sums, float* dscale, float* dbias) {
  ColumnSums2(
      threads, rows, cols,
      [&](int r, int c, float& a, float& b) {
        const size_t at = static_cast<size_t>(r) * cols + c;
        a = dy[at];
        b = dy[at] * (x[at] - mean[c]);
      },
      partials, sums);
  for (int c = 0; c < cols; ++c) {
    if (dbias != nullptr) dbias[c] = sums[c];
    if (dscale != nullptr) dscale[c] = sums[cols + c] * math::BatchNormRsqrt(var[c], epsilon);
  }
}

void BatchNormBackwardApply(int threads, int rows, int cols, float epsilon, int replicas,
                            const float* x, const float* dy, const float* moments, const float* var,
                            const float* scale, const float* sums, float* dx) {
  std::vector<math::BatchNormGrad> g(cols);
  for (int c = 0; c < cols; ++c) {
    g[c] = math::BatchNormGradFor(moments[c], moments[cols + c], var[c], epsilon, scale, c, sums[c],
                                  sums[cols + c], replicas, rows);
  }
#pragma omp parallel for num_threads(threads) schedule(static) if (Parallel(rows, cols))
  for (int r = 0; r < rows; ++r) {
    const size_t at = static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) dx[at + c] = math::BatchNormDx(g[c], x[at + c], dy[at + c]);
  }
}

}  // namespace lockstep::cpu
