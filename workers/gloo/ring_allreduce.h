// RingAllReduce: GlooCollective's float sum, a bandwidth-optimal ring (reduce-scatter, then
// all-gather) over Gloo's unbound-buffer transport, written for latency as much as for
// bandwidth (bench/results/allreduce.md). gloo::allreduce posts each receive just before
// the matching send, so that nearly every message waits for the peer's "ready to receive"
// notice before its bytes leave (a round trip through both ranks' device threads per
// segment), and allocates its scratch space per call. Here:
//   - every all-gather receive is posted at the start, straight into the caller's buffer
//     (no copy), so the peer's final segments go out the moment they are reduced;
//   - reduce-scatter segments land in a persistent inbox of kWindow segments (allocated
//     once) whose receives stand posted between calls: each slot's next receive is posted
//     as soon as it is consumed, so a call's first segments leave at once, never waiting
//     for a notice, and a small all-reduce costs one trip each way;
//   - a segment is forwarded (reduce-scatter's next step, or all-gather's first) as soon
//     as it is reduced, so reduction, sending and receiving overlap segment by segment.
// Each element is summed in the ring's order, which depends only on the ring size and n
// (chunk c is summed from rank c+1 onwards): results are deterministic for a given size
// and bitwise the same on every rank; for 2 ranks, a + b on both, whatever the segments.
//
// Thread safety: none; one call at a time (GlooCollective serializes them). Run throws
// what Gloo throws (GlooCollective maps it to a Status).
#ifndef LOCKSTEP_WORKERS_GLOO_RING_ALLREDUCE_H_
#define LOCKSTEP_WORKERS_GLOO_RING_ALLREDUCE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace lockstep::gloo_internal {

class RingAllReduce {
 public:
  // The largest segment, in bytes, that one message carries.
  static constexpr size_t kDefaultSegmentBytes = 256 << 10;
  // Reduce-scatter segments that may be in flight towards this rank at once.
  static constexpr int kWindow = 4;

  explicit RingAllReduce(std::shared_ptr<gloo::Context> context,
                         size_t segment_bytes = kDefaultSegmentBytes);
  ~RingAllReduce();

  // Sums data[0, n) across the ranks in place. Every wait ends by `deadline` (Gloo then
  // throws its timeout). All ranks must call with the same n, in the same order.
  void Run(float* data, size_t n, std::chrono::steady_clock::time_point deadline);

 private:
  // Posts the receive of reduce-scatter message `message` (counted over all calls) from
  // the left into inbox slot message % kWindow.
  void PostInbox(uint64_t message);

  const std::shared_ptr<gloo::Context> context_;
  const size_t segment_floats_;
  std::vector<float> inbox_;  // kWindow segments
  std::unique_ptr<gloo::transport::UnboundBuffer> inbox_buffer_;
  // Reduce-scatter messages consumed over all calls; receives stand posted for the next
  // kWindow.
  uint64_t received_ = 0;
};

}  // namespace lockstep::gloo_internal

#endif  // LOCKSTEP_WORKERS_GLOO_RING_ALLREDUCE_H_
