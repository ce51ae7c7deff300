// Column sums of a float matrix's rows, accumulated in double top to bottom, with each
// column's sum in a register over a tile of rows: a sum kept in memory is a store and a
// load per row, each waiting on the last. For inlining into a multiversioned loop
// (LS_MULTIVERSION), whose target it then takes.
#ifndef LOCKSTEP_WORKERS_CPU_DOUBLE_COLUMN_SUMS_H_
#define LOCKSTEP_WORKERS_CPU_DOUBLE_COLUMN_SUMS_H_

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace lockstep::cpu {

// Eight floats, and eight doubles (GCC's vector extension): a column block's values and
// its sums, which the compiler keeps in registers.
typedef float F8 __attribute__((vector_size(8 * sizeof(float))));
typedef double D8 __attribute__((vector_size(8 * sizeof(double))));

// Columns [c0, c0 + 8 * kVecs) of DoubleColumnSums over rows [begin, end): sum's values
// taken into registers, the rows added, and put back.
template <int kVecs>
__attribute__((always_inline)) inline void DoubleColumnSumsBlock(int cols, int c0, const float* x,
                                                                 double* sum, size_t begin,
                                                                 size_t end) {
  D8 acc[kVecs];
  std::memcpy(acc, sum + c0, sizeof(acc));
  for (size_t r = begin; r < end; ++r) {
    const float* row = x + r * cols + c0;
    for (int q = 0; q < kVecs; ++q) {
      F8 v;
      std::memcpy(&v, row + 8 * q, sizeof(v));
      acc[q] += __builtin_convertvector(v, D8);
    }
  }
  std::memcpy(sum + c0, acc, sizeof(acc));
}

// sum[c] += the sum of x[r * cols + c] over rows [begin, end), in row order, in double:
// across the columns in blocks of 32 and 8, then one at a time.
__attribute__((always_inline)) inline void AddDoubleColumnSums(int cols, const float* x,
                                                               double* sum, size_t begin,
                                                               size_t end) {
  int c0 = 0;
  for (; c0 + 32 <= cols; c0 += 32) DoubleColumnSumsBlock<4>(cols, c0, x, sum, begin, end);
  for (; c0 + 8 <= cols; c0 += 8) DoubleColumnSumsBlock<1>(cols, c0, x, sum, begin, end);
  for (; c0 < cols; ++c0) {
    double s = sum[c0];
    for (size_t r = begin; r < end; ++r) s += x[r * cols + c0];
    sum[c0] = s;
  }
}

// Rows per tile of DoubleColumnSums: in L1 for a few hundred columns.
inline constexpr size_t kColumnSumTileRows = 16;

// sum[c] = the sum of x[r * cols + c] over rows [begin, end), in row order, in double, a
// tile of rows at a time (which changes no column's order of addition).
__attribute__((always_inline)) inline void DoubleColumnSums(int cols, const float* x, double* sum,
                                                            size_t begin, size_t end) {
  std::fill_n(sum, cols, 0.0);
  for (size_t r0 = begin; r0 < end; r0 += kColumnSumTileRows) {
    AddDoubleColumnSums(cols, x, sum, r0, std::min(end, r0 + kColumnSumTileRows));
  }
}

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_DOUBLE_COLUMN_SUMS_H_
