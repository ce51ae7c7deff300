// ShmAllReduce: GlooCollective's float sum and int64 sum and max for ranks that share a
// host, through one shared-memory segment per rank instead of TCP loopback
// (bench/results/allreduce.md, exact-reduction.md).
//
// Setup (Create, after the TCP mesh's bootstrap, through the same store): each rank creates a
// segment of its own (POSIX shm, mode 0600, a random name), writes a random token in it and
// publishes "name token" under PREFIX/shm/RANK; every rank opens every peer's segment and
// checks its token; then each publishes whether it could, under PREFIX/shm-ok/RANK. The
// path is used only when every rank could open every other's (all on one host, in one
// /dev/shm, as one user): otherwise Create returns null and the job all-reduces over TCP.
// The names are unlinked once every rank has answered, so that nothing outlives the job in
// /dev/shm even if a process is killed later.
//
// A call reduces in pieces of at most `capacity` floats' bytes. For each piece every rank
// copies its values into its segment; rank r reduces the elements of chunk r (the ring's
// partition of the whole call, ring_allreduce.h) from all segments in the ring's order,
// x[r], then x[r+1] + acc, ..., and writes them back into its own segment; then every rank
// copies every chunk's results out. So a float sum's bits are the ring's for any number of
// ranks (for two, a + b), whichever path a job's ranks take: recovery onto other hosts
// changes no bits. Int64 sums and maxima (core/exact_sum.h's reductions, whose headroom
// keeps the sums in range) are exact: the same on either path in any order.
// Three counters per rank and piece (written, reduced, read) order the phases; waits are
// futexes on the peers' counters, in slices of at most 50 ms between which the peers'
// liveness is checked (each rank holds an exclusive flock on its segment for as long as it
// lives; a peer's lock that can be taken means the peer is gone).
//
// Errors: DEADLINE_EXCEEDED at the deadline, UNAVAILABLE when a peer is gone or aborted,
// ABORTED after this rank's Abort. After an error the instance is unusable (GlooCollective drops
// it). Thread safety: Run from one thread at a time; Abort from any thread.
#ifndef LOCKSTEP_WORKERS_GLOO_SHM_ALLREDUCE_H_
#define LOCKSTEP_WORKERS_GLOO_SHM_ALLREDUCE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/collective.h"
#include "core/store.h"

namespace lockstep::gloo_internal {

class ShmAllReduce {
 public:
  // Floats per piece by default (16 MiB of segment per rank; int64 pieces are half as long).
  static constexpr size_t kDefaultCapacity = size_t{4} << 20;

  // The shared-memory path of `rank` of `size` (size >= 2), or null when some rank cannot
  // use it (then no rank does). Keys under `prefix`/shm/ and `prefix`/shm-ok/; each store
  // wait is bounded by `timeout`. Errors: the store's.
  static absl::StatusOr<std::unique_ptr<ShmAllReduce>> Create(int rank, int size, Store* store,
                                                              const std::string& prefix,
                                                              absl::Duration timeout,
                                                              size_t capacity = kDefaultCapacity);
  ~ShmAllReduce();

  // Sums data[0, n) across the ranks in place, every wait ending by `deadline`. All ranks
  // call with the same n, in the same order.
  absl::Status Run(float* data, size_t n, std::chrono::steady_clock::time_point deadline);
  // The same for int64s: their sum, or with `maximum` their maximum, in place.
  absl::Status Run(int64_t* data, size_t n, bool maximum,
                   std::chrono::steady_clock::time_point deadline);
  // Collective::AllReduceBy: in pieces of whole r.align's, each rank copies its `local`
  // contributions to the piece into its segment (their count in its header); rank c
  // reduces chunk c (the ring's partition, its bounds rounded up to multiples of
  // r.align) from every segment's contributions into its own segment's first, and every
  // rank copies every chunk's results out. INVALID_ARGUMENT where the ranks' counts do
  // not add up to r.total, or !CanRunBy.
  absl::Status RunBy(std::span<const float* const> local, size_t n, float* out,
                     const ChunkReduction& r, std::chrono::steady_clock::time_point deadline);
  // Whether a segment holds `total` contributions of a piece of at least `align` floats.
  bool CanRunBy(int total, size_t align) const {
    return total >= 1 && align >= 1 && capacity_floats() / total >= align;
  }
  size_t capacity_floats() const { return capacity_bytes_ / sizeof(float); }

  // Makes the Run in flight here (if any) and every later one fail with ABORTED (`why`'s
  // message), and the peers' with UNAVAILABLE: they see this rank's segment marked aborted.
  void Abort(const absl::Status& why);

  struct Segment;  // a mapped segment (shm_allreduce.cc)

 private:
  ShmAllReduce(int rank, std::vector<std::unique_ptr<Segment>> segments, size_t capacity_bytes);
  // Waits until counter `which` of every rank but this one has reached `target`.
  absl::Status WaitAll(int which, uint32_t target, std::chrono::steady_clock::time_point deadline);
  absl::Status WaitOne(int peer, int which, uint32_t target,
                       std::chrono::steady_clock::time_point deadline);
  // Sets this rank's counter `which` and wakes its waiters.
  void Publish(int which, uint32_t value);
  // Every piece of a call of n values, reduced by acc[i] = combine(x[i], acc[i]).
  template <typename T, typename Combine>
  absl::Status RunPieces(T* data, size_t n, Combine combine,
                         std::chrono::steady_clock::time_point deadline);
  // One piece: values [from, to) of a call of n.
  template <typename T, typename Combine>
  absl::Status Piece(T* data, size_t n, size_t from, size_t to, Combine combine,
                     std::chrono::steady_clock::time_point deadline);
  // RunBy's piece: values [from, to) of a call of n, each contribution `len` floats apart
  // in the segments.
  absl::Status PieceBy(std::span<const float* const> local, size_t n, float* out, size_t from,
                       size_t to, size_t len, const ChunkReduction& r,
                       std::chrono::steady_clock::time_point deadline);
  // The first element of chunk `chunk` of a call of n, rounded up to a multiple of `align`.
  size_t ChunkBegin(size_t n, int chunk, size_t align) const;
  absl::Status AbortedError();

  const int rank_;
  const size_t capacity_bytes_;                     // of a segment's data
  std::vector<std::unique_ptr<Segment>> segments_;  // by rank; this rank's is its own
  uint32_t pieces_ = 0;                             // pieces done over all calls
  std::atomic<bool> aborted_{false};                // Abort was called: why_ is set
  absl::Mutex mu_;
  absl::Status why_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep::gloo_internal

#endif  // LOCKSTEP_WORKERS_GLOO_SHM_ALLREDUCE_H_
