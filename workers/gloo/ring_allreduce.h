// RingAllReduce: GlooCollective's float sum over Gloo's unbound-buffer transport, written
// for latency as much as for bandwidth (bench/results/allreduce.md).
//   - Two ranks exchange buffers of up to kExchangeMaxBytes whole, segment by segment,
//     and each adds the other's: the bytes of a ring in one trip instead of two (a + b is
//     b + a: both ranks end with the same bits, whatever the segments). Larger buffers,
//     and more ranks, run a bandwidth-optimal ring (reduce-scatter, then all-gather),
//     each segment forwarded as soon as it is reduced and every all-gather receive posted
//     at the start straight into the caller's buffer (no copy): half the additions of the
//     exchange, which is what large buffers are bound by on a shared CPU. For two ranks
//     the ring, too, sums a + b: the bits never depend on which path ran.
//   - Incoming partial sums land in a persistent inbox of kWindow segments (allocated
//     once) whose receives stand posted between calls: each slot's next receive is posted
//     as soon as it is consumed, so a call's first segments leave at once.
// gloo::allreduce, by contrast, posts each receive just before the matching send, so that
// nearly every message waits for the peer's "ready to receive" notice before its bytes
// leave (a trip through both ranks' device threads per segment), and allocates its
// scratch space per call.
// In the ring (3 or more ranks) element i of chunk c is summed from rank c on, in ring
// order: deterministic for a given ring size and n, and bitwise the same on every rank.
//
// RingAllReduceOf<int64_t> is the same algorithm on int64s (the exact sums of
// core/exact_sum.h, and their scales' maximum), on slots of its own: the two element types' rings
// share a context but never each other's messages.
//
// Thread safety: one Run at a time (GlooCollective serializes them); Abort from any
// thread. Run throws what Gloo throws (GlooCollective maps it to a Status).
#ifndef LOCKSTEP_WORKERS_GLOO_RING_ALLREDUCE_H_
#define LOCKSTEP_WORKERS_GLOO_RING_ALLREDUCE_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

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
  // Reduce-scatter segments that may be in flight towards this rank at once (the inbox:
  // 4 MiB by default).
  static constexpr int kWindow = 4;
  // Two ranks exchange buffers up to this size whole (measured: bench/results/allreduce.md).
  static constexpr size_t kExchangeMaxBytes = 1 << 20;

  // Posts the inbox's standing receives (throws what Gloo throws).
  explicit RingAllReduceOf(std::shared_ptr<gloo::Context> context,
                           size_t segment_bytes = kDefaultSegmentBytes);
  ~RingAllReduceOf();

  // Sums data[0, n) across the ranks in place. Every wait ends by `deadline` (Gloo then
  // throws its timeout). All ranks must call with the same n, in the same order.
  // `maximum` (int64 only): the element-wise maximum instead of the sum.
  void Run(T* data, size_t n, std::chrono::steady_clock::time_point deadline, bool maximum = false);

  // Ends the Run in flight on another thread at once (its wait throws "aborted"), and every
  // later one: a peer stopped mid-call closes nothing, and Gloo wakes a wait only through
  // its buffer, so without this the Run would wait out its deadline. Thread-safe; the ring
  // is unusable after it.
  void Abort();

 private:
  class Tracked;  // the call's buffer, known to Abort while it lives

  void Exchange(T* data, size_t n, std::chrono::steady_clock::time_point deadline);
  // Posts the receive of reduce-scatter message `message` (counted over all calls) from
  // the left into inbox slot message % kWindow.
  void PostInbox(uint64_t message);

  const std::shared_ptr<gloo::Context> context_;
  const size_t segment_floats_;  // elements (of T) per segment
  std::vector<T> inbox_;         // kWindow segments
  std::unique_ptr<gloo::transport::UnboundBuffer> inbox_buffer_;
  // Reduce-scatter messages consumed over all calls; receives stand posted for the next
  // kWindow.
  uint64_t received_ = 0;
  bool maximum_ = false;                                   // the current Run's reduction
  std::mutex abort_mu_;                                    // never held while waiting
  bool aborted_ = false;                                   // guarded by abort_mu_
  gloo::transport::UnboundBuffer* call_buffer_ = nullptr;  // guarded by abort_mu_
};

using RingAllReduce = RingAllReduceOf<float>;
extern template class RingAllReduceOf<float>;
extern template class RingAllReduceOf<int64_t>;

}  // namespace lockstep::gloo_internal

#endif  // LOCKSTEP_WORKERS_GLOO_RING_ALLREDUCE_H_
