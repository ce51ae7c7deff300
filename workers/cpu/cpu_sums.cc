// Long float sums in a fixed tree, for precision as good as XLA's. Contract: cpu_sums.h.
#include "workers/cpu/cpu_sums.h"

#include <algorithm>
#include <vector>

#include "workers/cpu/double_column_sums.h"
#include "workers/cpu/multiversion.h"
#include "workers/cpu/parallel_min.h"

namespace lockstep::cpu {
namespace {

// p[c] = the sum of rows [begin, end) of x, in row order from the first, accumulated in
// double (`acc`, cols of them) and rounded once.
LS_MULTIVERSION void BlockSums(int begin, int end, int cols, const float* x, double* acc,
                               float* p) {
  DoubleColumnSums(cols, x, acc, begin, end);
  for (int c = 0; c < cols; ++c) p[c] = static_cast<float>(acc[c]);
}

LS_MULTIVERSION void AddInto(size_t begin, size_t end, const float* b, float* a) {
  for (size_t i = begin; i < end; ++i) a[i] += b[i];
}

}  // namespace

void PairwiseSum(int threads, int count, size_t n, float* parts, float* out) {
  if (count == 0) {
    std::fill_n(out, n, 0.0f);
    return;
  }
  // Level by level: part k += part k + step for k a multiple of 2 * step.
  for (int step = 1; step < count; step *= 2) {
    const int pairs = (count - step + 2 * step - 1) / (2 * step);
    const bool parallel = static_cast<size_t>(pairs) * n > kParallelMin;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int j = 0; j < pairs; ++j) {
      const size_t k = static_cast<size_t>(j) * 2 * step;
      AddInto(0, n, parts + (k + step) * n, parts + k * n);
    }
  }
  std::copy_n(parts, n, out);
}

void ColumnSums(int threads, int rows, int cols, const float* x, float* out) {
  const int blocks = (rows + kSumBlockRows - 1) / kSumBlockRows;
  std::vector<float> parts(static_cast<size_t>(blocks) * cols);
  std::vector<double> acc(static_cast<size_t>(blocks) * cols);
  const bool parallel = static_cast<size_t>(rows) * cols > kParallelMin;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
  for (int b = 0; b < blocks; ++b) {
    BlockSums(b * kSumBlockRows, std::min(rows, (b + 1) * kSumBlockRows), cols, x,
              acc.data() + static_cast<size_t>(b) * cols,
              parts.data() + static_cast<size_t>(b) * cols);
  }
  PairwiseSum(threads, blocks, cols, parts.data(), out);
}

}  // namespace lockstep::cpu
