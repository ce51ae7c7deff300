// ExactSum: an order-independent sum of float32 contributions across ranks. A job on V
// logical replicas (docs/elastic.md) sums V contributions per element (gradients,
// BatchNorm moments) that its workers hold in groups of any size; the result must not
// depend on the grouping, so floats (whose addition is not associative) are not summed.
//
// The method, per block of `block` elements:
//   1. e = the smallest exponent with |x| < 2^e for every contribution x in the block, on
//      every rank: a local max, then Collective::AllReduceInt64 kMax (max is exact).
//   2. Each contribution becomes the int64 round(x * 2^s), s = 62 - h - e, where
//      h = ceil(log2 V) is headroom for V: |round(x * 2^s)| <= 2^(62-h), so the sum of
//      all V stays within 2^62 and never overflows int64.
//   3. The rank's contributions are added as int64, then all-reduced (kSum): integer
//      addition is associative and commutative, so the total is the same integer however
//      the V contributions are grouped into ranks and ordered.
//   4. The result is float(total) * 2^-s: one correctly rounded conversion.
// Every step is a function of the multiset of V contributions alone (the scale of step 1
// included), so the bits are the same on any number of ranks. Error against the true sum
// T: every contribution with |x| >= 2^(e-39+h) converts exactly (its 24 significant bits
// fit); smaller ones are rounded to the fixed-point grid, by at most 2^(e+h-63) each. So
//   |result - T| <= 0.5 ulp(T) + V * 2^(e+h-63) <= 0.5 ulp(T) + M * 2^(2h-62),
// M = the block's largest |x| (2^e <= 2M): the correctly rounded sum, up to a term 2^-58
// times the block's largest contribution for V = 4. Results below float's normal range
// are rounded once more (deterministically).
//
// A block with a non-finite contribution (inf, NaN) on any rank comes out NaN, element by
// element, on every rank (a diverged step; JAX would give inf or NaN there).
//
// How it is computed. The result of step 4 is a function of each element's V
// contributions and its block's exponent alone, and Reduce computes it from them
// directly, block by block: where every contribution of a block converts exactly (step 2
// rounds nothing), the fixed-point total is the true sum T, and the result is T correctly
// rounded to float, which a float add gives for V = 2 and a double sum (exact where the
// block's magnitudes span at most 53 - h bits) for V > 2; other blocks, and results
// below float's normal range, take steps 2-4 as written. Where the collective can run it
// (Collective::AllReduceBy: the shared-memory path of co-located ranks), the ranks trade
// their raw contributions and each reduces a block-aligned chunk of the elements from
// all V of them: no exponent round, the float all-reduce's bytes for one contribution
// per rank, and a float add's arithmetic where it suffices. Elsewhere (the TCP ring)
// the steps run as written: an int64 max and an int64 sum, 8 bytes per element (twice
// a float32 all-reduce's) plus one int64 per block, and the conversions on the host.
// Both give the same bits (exact_sum_test, exact_sum_gloo_test). Memory: host memory
// (contributions, result and the collective's buffers alike), i.e. the CPU backend with
// Gloo.
//
// Thread safety: none; one thread drives an ExactSum (and its collective's FIFO).
#ifndef LOCKSTEP_CORE_EXACT_SUM_H_
#define LOCKSTEP_CORE_EXACT_SUM_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "core/collective.h"

namespace lockstep {

class ExactSum {
 public:
  // Elements per scale: a block's small elements keep float precision down to 2^-39 of
  // its largest (step 4 above), and the max all-reduce carries n / block int64s.
  static constexpr size_t kDefaultBlock = 1024;

  // `collective`: the ranks that hold the V contributions (null: this rank holds all of
  // them); it must outlive this object. `contributions`: V, over all ranks, >= 1.
  ExactSum(Collective* collective, int contributions, size_t block = kDefaultBlock);

  // Sums, element by element, the n floats of each of this rank's `local` contributions
  // (at least one; the ranks' counts add up to V) with every other rank's, and writes the
  // sum to `out` (which may be one of `local`). Every rank must call with the same n, in
  // the same order. `also_max` (the same length on every rank) is all-reduced with the
  // sum (kMax): on return each element is its maximum over the ranks (a rank that puts
  // INT64_MIN where another puts a value learns that value exactly). Errors:
  // INVALID_ARGUMENT for no contributions or a null pointer with n > 0; the collective's
  // as they come.
  absl::Status Sum(std::span<const float* const> local, size_t n, float* out,
                   const CollectiveOptions& options, std::span<int64_t> also_max = {});
  // Sum(local, n, out, options) started on the collective's communication thread where it
  // offers AllReduceBy, so that the caller computes on meanwhile (a bucket of gradients
  // while backward runs): `local` and `out` must stay untouched until Collective::Wait of
  // the ticket (or a later one) has returned. Elsewhere it runs now (ticket 0). A sum of
  // the elements [a, a + n) of a longer vector, a a multiple of the block, gives the bits
  // that the sum of the whole vector gives them. The same errors as Sum's.
  absl::StatusOr<CollectiveTicket> StartSum(std::span<const float* const> local, size_t n,
                                            float* out, const CollectiveOptions& options);
  // Whether StartSum runs on the collective's thread (false: now, on the caller's).
  bool overlaps() const { return ByChunks(); }
  size_t block() const { return block_; }

  // The result for `n` elements from all V of their contributions `all` (V =
  // `contributions`, `all`'s size): what Sum computes, as a pure function, into `out`
  // (which may be one of `all`). The elements must start a block (the call's element 0
  // or a multiple of `block`).
  static void Reduce(int contributions, size_t block, std::span<const float* const> all, size_t n,
                     float* out);

  // The exponent step 1 gives a block of the contributions: 2^e above every |x|, or
  // kZeroBlock when all are 0, or kNonFinite when one is inf or NaN; exposed for tests.
  static constexpr int64_t kZeroBlock = -(int64_t{1} << 20);
  static constexpr int64_t kNonFinite = int64_t{1} << 20;
  static int64_t BlockExponent(std::span<const float* const> local, size_t begin, size_t end);
  // h above: ceil(log2 contributions).
  static int Headroom(int contributions);

 private:
  // Steps 1-4 as written, over AllReduceInt64 (collectives without AllReduceBy).
  absl::Status SumFixedPoint(std::span<const float* const> local, size_t n, float* out,
                             const CollectiveOptions& options, std::span<int64_t> also_max);
  // Whether the collective computes the sum by AllReduceBy (false: alone, or steps 1-4).
  bool ByChunks() const;
  // Reduce, for AllReduceBy.
  ChunkReduction ChunkReducer() const;

  Collective* const collective_;
  const int contributions_;
  const size_t block_;
  std::vector<int64_t> exponents_, fixed_;  // scratch, kept between calls
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_EXACT_SUM_H_
