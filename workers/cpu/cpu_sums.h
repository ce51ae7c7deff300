// Long float sums in a fixed tree, for precision as good as XLA's: a sum of n terms added
// one after the other errs by up to n ulps of the running total (a conv bias's gradient
// over a large image came out far further from float64 than XLA's); summed in fixed
// blocks whose sums are then added pairwise, the error bound grows with the block length
// plus log2 of the block count instead; with each block accumulated in double, with half
// an ulp per block plus log2 of the block count (XLA's float32 reductions come out within
// an ulp or two; a 128-row block in float was well above that on small sums). The tree
// depends only on the sizes, never on the thread count, so the bits do not either.
#ifndef LOCKSTEP_WORKERS_CPU_CPU_SUMS_H_
#define LOCKSTEP_WORKERS_CPU_CPU_SUMS_H_

#include <cstddef>

namespace lockstep::cpu {

// Rows per block of ColumnSums: each block summed in row order (in double), the blocks
// pairwise.
inline constexpr int kSumBlockRows = 128;

// out[c] = the sum over r < rows of x[r * cols + c].
void ColumnSums(int threads, int rows, int cols, const float* x, float* out);

// out[i] = the sum over k < count of parts[k * n + i], added pairwise: (p0 + p1) + (p2 +
// p3) for four. `parts` is overwritten.
void PairwiseSum(int threads, int count, size_t n, float* parts, float* out);

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_CPU_SUMS_H_
