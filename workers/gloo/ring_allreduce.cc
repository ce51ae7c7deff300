// RingAllReduce: GlooCollective's float sum over Gloo's unbound-buffer transport, written for
// latency as much as for bandwidth. Contract: ring_allreduce.h.
#include "workers/gloo/ring_allreduce.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "gloo/common/error.h"
#include "gloo/context.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"

namespace lockstep::gloo_internal {
namespace {

// Slots of our own (a prefix no Gloo algorithm uses), two per element type: one per stream
// of messages from the left neighbour, partial sums into the inbox and final sums into the
// caller's buffer. Each element type's ring has its own standing receives.
constexpr uint8_t kSlotPrefix = 0x4c;  // 'L'
template <typename T>
constexpr uint32_t kTypeSlots = std::is_same_v<T, float> ? 0 : 2;
template <typename T>
const uint64_t kReduceScatterSlot = gloo::Slot::build(kSlotPrefix, kTypeSlots<T>);
template <typename T>
const uint64_t kAllGatherSlot = gloo::Slot::build(kSlotPrefix, kTypeSlots<T> + 1);

// Gloo reads a zero timeout as "none": a deadline already past still waits 1 ms.
std::chrono::milliseconds Remaining(std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

void AddInto(float* __restrict dst, const float* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

// Two's complement addition (no signed overflow: callers keep the sums in range), or the
// maximum.
void AddInto(int64_t* __restrict dst, const int64_t* __restrict src, size_t n, bool maximum) {
  if (maximum) {
    for (size_t i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    dst[i] = static_cast<int64_t>(static_cast<uint64_t>(dst[i]) + static_cast<uint64_t>(src[i]));
  }
}

void AddInto(float* __restrict dst, const float* __restrict src, size_t n, bool) {
  AddInto(dst, src, n);
}

// One segment of a chunk: floats [begin, begin + size) of the caller's buffer.
struct Segment {
  size_t begin = 0, size = 0;
};

// The ring's partition of n floats: `ranks` chunks of nearly equal size (chunk c is what
// rank c - 1 ends reduce-scatter owning), each cut into the same number of segments of at
// most segment_floats. Every rank computes the same partition from n alone.
class Partition {
 public:
  Partition(size_t n, int ranks, size_t segment_floats) : n_(n), ranks_(ranks) {
    const size_t largest = (n + ranks - 1) / ranks;
    segments_ = std::max<size_t>(1, (largest + segment_floats - 1) / segment_floats);
  }
  size_t segments() const { return segments_; }
  Segment Get(int chunk, size_t j) const {
    const size_t begin = ChunkBegin(chunk), size = ChunkBegin(chunk + 1) - begin;
    const size_t from = size * j / segments_, to = size * (j + 1) / segments_;
    return {begin + from, to - from};
  }

 private:
  size_t ChunkBegin(int chunk) const { return RingChunkBegin(n_, ranks_, chunk); }

  const size_t n_;
  const int ranks_;
  size_t segments_;
};

void Check(bool waited, const char* what) {
  if (!waited) GLOO_THROW_IO_EXCEPTION("ring all-reduce: ", what, " aborted");
}

}  // namespace

// The call's buffer, registered for Abort from its creation to its destruction; created
// after an Abort, it throws.
template <typename T>
class RingAllReduceOf<T>::Tracked {
 public:
  Tracked(RingAllReduceOf& ring, T* data, size_t n)
      : ring_(ring), buffer_(ring.context_->createUnboundBuffer(data, n * sizeof(T))) {
    std::lock_guard<std::mutex> lock(ring_.abort_mu_);
    Check(!ring_.aborted_, "call");
    ring_.call_buffer_ = buffer_.get();
  }
  ~Tracked() {
    std::lock_guard<std::mutex> lock(ring_.abort_mu_);
    ring_.call_buffer_ = nullptr;
  }
  gloo::transport::UnboundBuffer* operator->() const { return buffer_.get(); }

 private:
  RingAllReduceOf& ring_;
  const std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
};

template <typename T>
void RingAllReduceOf<T>::Abort() {
  std::lock_guard<std::mutex> lock(abort_mu_);
  if (aborted_) return;
  aborted_ = true;
  // Gloo keeps each abort until a wait takes it: one that starts later ends at once too.
  inbox_buffer_->abortWaitRecv();
  if (call_buffer_ != nullptr) {
    call_buffer_->abortWaitRecv();
    call_buffer_->abortWaitSend();
  }
}

template <typename T>
RingAllReduceOf<T>::RingAllReduceOf(std::shared_ptr<gloo::Context> context, size_t segment_bytes)
    : context_(std::move(context)),
      segment_floats_(std::max<size_t>(1, segment_bytes / sizeof(T))),
      inbox_(segment_floats_ * kWindow) {
  inbox_buffer_ = context_->createUnboundBuffer(inbox_.data(), inbox_.size() * sizeof(T));
  if (context_->size == 1) return;
  for (uint64_t g = 0; g < kWindow; ++g) PostInbox(g);
}

template <typename T>
void RingAllReduceOf<T>::PostInbox(uint64_t message) {
  const int left = (context_->rank + context_->size - 1) % context_->size;
  const size_t slot_bytes = segment_floats_ * sizeof(T);
  inbox_buffer_->recv(left, kReduceScatterSlot<T>, (message % kWindow) * slot_bytes, slot_bytes);
}

template <typename T>
RingAllReduceOf<T>::~RingAllReduceOf() = default;

template <typename T>
void RingAllReduceOf<T>::Exchange(T* data, size_t n,
                                  std::chrono::steady_clock::time_point deadline) {
  const int peer = 1 - context_->rank;
  const Tracked buffer(*this, data, n);
  const size_t m = (n + segment_floats_ - 1) / segment_floats_;  // segments, none empty
  const auto begin = [n, m](size_t j) { return n * j / m; };
  for (size_t j = 0; j < m; ++j) {
    buffer->send(peer, kReduceScatterSlot<T>, begin(j) * sizeof(T),
                 (begin(j + 1) - begin(j)) * sizeof(T));
  }
  for (size_t j = 0; j < m; ++j) {
    // Sends complete in order: once the j-th has, segment j has left and may be summed.
    Check(buffer->waitSend(Remaining(deadline)), "send");
    Check(inbox_buffer_->waitRecv(Remaining(deadline)), "receive");
    AddInto(data + begin(j), inbox_.data() + (received_ % kWindow) * segment_floats_,
            begin(j + 1) - begin(j), maximum_);
    PostInbox(received_ + kWindow);
    ++received_;
  }
}

template <typename T>
void RingAllReduceOf<T>::Run(T* data, size_t n, std::chrono::steady_clock::time_point deadline,
                             bool maximum) {
  if (context_->size == 1 || n == 0) return;
  maximum_ = std::is_same_v<T, int64_t> && maximum;
  if (context_->size == 2 && n * sizeof(T) <= kExchangeMaxBytes) {
    return Exchange(data, n, deadline);
  }
  const int ranks = context_->size, rank = context_->rank;
  const int left = (rank + ranks - 1) % ranks, right = (rank + 1) % ranks;
  const auto chunk = [ranks](int c) { return ((c % ranks) + ranks) % ranks; };
  const Partition part(n, ranks, segment_floats_);
  const size_t m = part.segments();
  const int steps = ranks - 1;  // of reduce-scatter, and of all-gather
  const Tracked buffer(*this, data, n);
  size_t sends = 0;
  const auto send = [&](uint64_t slot, Segment s) {
    if (s.size == 0) return;
    buffer->send(right, slot, s.begin * sizeof(T), s.size * sizeof(T));
    ++sends;
  };
  // All-gather step t brings chunk rank - t, final, from the left: post them all now.
  for (int t = 0; t < steps; ++t) {
    for (size_t j = 0; j < m; ++j) {
      const Segment s = part.Get(chunk(rank - t), j);
      if (s.size > 0) {
        buffer->recv(left, kAllGatherSlot<T>, s.begin * sizeof(T), s.size * sizeof(T));
      }
    }
  }
  // Reduce-scatter: the left's first segments land in the standing receives at once.
  for (size_t j = 0; j < m; ++j) send(kReduceScatterSlot<T>, part.Get(chunk(rank), j));
  // Reduce-scatter step t brings chunk rank - 1 - t from the left, summed so far. Reduce
  // each segment into place, then pass it on at once: to the next reduce-scatter step, or,
  // summed over every rank after the last, to the all-gather.
  for (int t = 0; t < steps; ++t) {
    for (size_t j = 0; j < m; ++j) {
      const Segment s = part.Get(chunk(rank - 1 - t), j);
      if (s.size == 0) continue;
      Check(inbox_buffer_->waitRecv(Remaining(deadline)), "reduce-scatter receive");
      AddInto(data + s.begin, inbox_.data() + (received_ % kWindow) * segment_floats_, s.size,
              maximum_);
      PostInbox(received_ + kWindow);
      ++received_;
      send(t + 1 < steps ? kReduceScatterSlot<T> : kAllGatherSlot<T>, s);
    }
  }
  // All-gather: forward what arrives (step t's chunk is step t + 1's to send).
  for (int t = 0; t < steps; ++t) {
    for (size_t j = 0; j < m; ++j) {
      const Segment s = part.Get(chunk(rank - t), j);
      if (s.size == 0) continue;
      Check(buffer->waitRecv(Remaining(deadline)), "all-gather receive");
      if (t + 1 < steps) send(kAllGatherSlot<T>, s);
    }
  }
  for (size_t i = 0; i < sends; ++i) Check(buffer->waitSend(Remaining(deadline)), "send");
}

template class RingAllReduceOf<float>;
template class RingAllReduceOf<int64_t>;

}  // namespace lockstep::gloo_internal
