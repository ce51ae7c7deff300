// RingAllReduce: GlooCollective's float sum over the mesh's TCP connections (tcp_mesh.h),
// written for latency as much as for bandwidth (bench/results/allreduce.md).
//   - Two ranks exchange buffers of up to kExchangeMaxBytes whole, and each adds the
//     other's: the bytes of a ring in one trip instead of two (a + b is b + a: both ranks
//     end with the same bits). Larger buffers, and more ranks, run a bandwidth-optimal ring
//     (reduce-scatter, then all-gather), each segment forwarded as soon as it is reduced,
//     all-gather segments read straight into the caller's buffer (no copy): half the
//     additions of the exchange, which is what large buffers are bound by on a shared CPU.
//     For two ranks the ring, too, sums a + b: the bits never depend on which path ran.
//   - Messages go out as soon as they are queued and incoming ones are read as they come,
//     in one poll loop (TcpMesh::Transfer): no "ready to receive" round trip per segment, no
//     thread hand-off, and the socket buffers hold what a fast neighbour sends ahead.
// In the ring (3 or more ranks) element i of chunk c is summed from rank c on, in ring
// order: deterministic for a given ring size and n, and bitwise the same on every rank.
//
// RingAllReduceOf<int64_t> is the same algorithm on int64s (the exact sums of
// core/exact_sum.h, and their scales' maximum); the two element types' rings share a mesh,
// their calls serialized by GlooCollective (each call's messages are read exactly).
//
// Thread safety: one Run at a time per mesh (GlooCollective serializes them); the mesh's
// Abort ends a Run in flight from any thread.
#ifndef LOCKSTEP_WORKERS_GLOO_RING_ALLREDUCE_H_
#define LOCKSTEP_WORKERS_GLOO_RING_ALLREDUCE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "workers/gloo/tcp_mesh.h"

namespace lockstep::gloo_internal {

// The first float of chunk `chunk` in the ring's partition of n floats among `ranks`:
// nearly equal chunks, the first n % ranks of them one float longer. Element i of chunk c
// is summed from rank c on, in ring order (see above).
inline size_t RingChunkBegin(size_t n, int ranks, int chunk) {
  return n / ranks * chunk + std::min<size_t>(chunk, n % ranks);
}

template <typename T>  // float or int64_t
class RingAllReduceOf {
 public:
  // The largest segment, in bytes, that one message carries.
  static constexpr size_t kDefaultSegmentBytes = 1 << 20;
  // Two ranks exchange buffers up to this size whole (measured: bench/results/allreduce.md).
  static constexpr size_t kExchangeMaxBytes = 1 << 20;

  explicit RingAllReduceOf(std::shared_ptr<TcpMesh> mesh,
                           size_t segment_bytes = kDefaultSegmentBytes);

  // Sums data[0, n) across the ranks in place. Every wait ends by `deadline`. All ranks
  // must call with the same n, in the same order. `maximum` (int64 only): the element-wise
  // maximum instead of the sum. Errors: TcpMesh::Transfer's, after which the ring and its
  // mesh are unusable.
  absl::Status Run(T* data, size_t n, SteadyTime deadline, bool maximum = false);

 private:
  absl::Status Exchange(T* data, size_t n, SteadyTime deadline);
  absl::Status Ring(T* data, size_t n, SteadyTime deadline);

  const std::shared_ptr<TcpMesh> mesh_;
  const size_t segment_floats_;  // elements (of T) per segment
  std::vector<T> inbox_;         // a peer's partial sums (or, exchanging, its whole buffer)
  bool maximum_ = false;         // the current Run's reduction
};

using RingAllReduce = RingAllReduceOf<float>;
extern template class RingAllReduceOf<float>;
extern template class RingAllReduceOf<int64_t>;

}  // namespace lockstep::gloo_internal

#endif  // LOCKSTEP_WORKERS_GLOO_RING_ALLREDUCE_H_
