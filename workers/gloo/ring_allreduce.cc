// RingAllReduce: GlooCollective's float sum over the mesh's TCP connections, written for
// latency as much as for bandwidth. Contract: ring_allreduce.h.
#include "workers/gloo/ring_allreduce.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "core/status_macros.h"

namespace lockstep::gloo_internal {
namespace {

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

}  // namespace

template <typename T>
RingAllReduceOf<T>::RingAllReduceOf(std::shared_ptr<TcpMesh> mesh, size_t segment_bytes)
    : mesh_(std::move(mesh)),
      segment_floats_(std::max<size_t>(1, segment_bytes / sizeof(T))),
      inbox_(std::max(segment_floats_, kExchangeMaxBytes / sizeof(T))) {}

template <typename T>
absl::Status RingAllReduceOf<T>::Run(T* data, size_t n, SteadyTime deadline, bool maximum) {
  if (mesh_->size() == 1 || n == 0) return absl::OkStatus();
  maximum_ = std::is_same_v<T, int64_t> && maximum;
  if (mesh_->size() == 2 && n * sizeof(T) <= kExchangeMaxBytes) return Exchange(data, n, deadline);
  return Ring(data, n, deadline);
}

template <typename T>
absl::Status RingAllReduceOf<T>::Exchange(T* data, size_t n, SteadyTime deadline) {
  const int peer = 1 - mesh_->rank();
  TcpMesh::Transfer transfer(*mesh_, peer, peer, deadline);
  transfer.Send(data, n * sizeof(T));
  RETURN_IF_ERROR(transfer.Receive(inbox_.data(), n * sizeof(T)));
  RETURN_IF_ERROR(transfer.Flush());  // the bytes sent are read from data: sum after
  AddInto(data, inbox_.data(), n, maximum_);
  return absl::OkStatus();
}

template <typename T>
absl::Status RingAllReduceOf<T>::Ring(T* data, size_t n, SteadyTime deadline) {
  const int ranks = mesh_->size(), rank = mesh_->rank();
  const int left = (rank + ranks - 1) % ranks, right = (rank + 1) % ranks;
  const auto chunk = [ranks](int c) { return ((c % ranks) + ranks) % ranks; };
  const Partition part(n, ranks, segment_floats_);
  const size_t m = part.segments();
  const int steps = ranks - 1;  // of reduce-scatter, and of all-gather
  TcpMesh::Transfer transfer(*mesh_, right, left, deadline);
  const auto send = [&](Segment s) {
    if (s.size > 0) transfer.Send(data + s.begin, s.size * sizeof(T));
  };
  // Reduce-scatter: this rank's own chunk goes first.
  for (size_t j = 0; j < m; ++j) send(part.Get(chunk(rank), j));
  // Reduce-scatter step t brings chunk rank - 1 - t from the left, summed so far. Reduce
  // each segment into place, then pass it on at once: to the next reduce-scatter step, or,
  // summed over every rank after the last, to the all-gather. A segment is overwritten
  // (below) only after the whole ring has read it, so its bytes have left by then.
  for (int t = 0; t < steps; ++t) {
    for (size_t j = 0; j < m; ++j) {
      const Segment s = part.Get(chunk(rank - 1 - t), j);
      if (s.size == 0) continue;
      RETURN_IF_ERROR(transfer.Receive(inbox_.data(), s.size * sizeof(T)));
      AddInto(data + s.begin, inbox_.data(), s.size, maximum_);
      send(s);
    }
  }
  // All-gather step t brings chunk rank - t, final, from the left, straight into place;
  // forward it (step t's chunk is step t + 1's to send).
  for (int t = 0; t < steps; ++t) {
    for (size_t j = 0; j < m; ++j) {
      const Segment s = part.Get(chunk(rank - t), j);
      if (s.size == 0) continue;
      RETURN_IF_ERROR(transfer.Receive(data + s.begin, s.size * sizeof(T)));
      if (t + 1 < steps) send(s);
    }
  }
  return transfer.Flush();
}

template class RingAllReduceOf<float>;
template class RingAllReduceOf<int64_t>;

}  // namespace lockstep::gloo_internal
