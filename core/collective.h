// Collective: the data plane's all-reduce across the N replicas of a job, c10d-style.
// Implementations (workers/gloo, workers/nccl) bind to a rendezvous at creation; options
// carry the timeout so that a dead peer is an error, never a hang.
//
// Overlap (DDP-style): StartAllReduceSum begins an all-reduce and returns at once, so that
// the caller computes on while it runs (Gloo: on the collective's communication thread,
// core/queued_collective.h; NCCL: on a communication stream ordered after the work queued
// so far); Wait(ticket) ends it. Started and synchronous all-reduces run one at a time in
// the order they were issued (a FIFO), so every rank must issue the same sequence; the
// synchronous AllReduceSum may be called while started ones are pending (it queues behind
// them and waits). Collectives without an overlap of their own run StartAllReduceSum
// synchronously (the defaults below).
//
// Integer reductions (AllReduceInt64): an element-wise sum or max of int64s, exact on
// every implementation (integer addition is associative and commutative, max is), so
// their result never depends on how the ranks' contributions are grouped or ordered; the
// base of core/exact_sum.h's order-independent float sum. They are synchronous and run in
// the same FIFO as the float all-reduces. Reductions by a function (AllReduceBy): every
// rank's raw contributions meet on the rank that reduces each range of the elements
// (core/exact_sum.h computes its sum so where the collective offers it); started or
// synchronous, in the same FIFO.
#ifndef LOCKSTEP_CORE_COLLECTIVE_H_
#define LOCKSTEP_CORE_COLLECTIVE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep {

// Names an all-reduce begun by StartAllReduceSum; tickets grow in issue order.
using CollectiveTicket = uint64_t;

// The element-wise reduction of AllReduceInt64.
enum class ReduceOp { kSum, kMax };

struct CollectiveOptions {
  absl::Duration timeout = absl::Seconds(30);
};

// What AllReduceBy computes: `reduce(all, n, out)` writes the results of n elements into
// `out` from all `total` contributions to them (`all`: in rank order, each rank's in its
// own order, each pointing at the range's first element); `out` may be one of `all` (the
// function reads an element's contributions before it writes the element). Every range
// starts at element 0 of the call or at a multiple of `align`.
struct ChunkReduction {
  int total = 0;
  size_t align = 1;
  std::function<void(std::span<const float* const> all, size_t n, float* out)> reduce;
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual std::string Name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Sums n floats (in the memory of the backend this collective was made for) across all
  // ranks, in place; every rank ends with bitwise the same result. Errors:
  // DEADLINE_EXCEEDED when a peer does not answer within options.timeout, UNAVAILABLE
  // when a peer is lost.
  virtual absl::Status AllReduceSum(float* data, size_t n, const CollectiveOptions& options) = 0;

  // Starts AllReduceSum(data, n, options) and returns its ticket, maybe before it is done:
  // `data` must stay untouched (not read, not written) until Wait on this ticket or a later
  // one has returned (CUDA: work queued after that Wait may use it). Its errors come from
  // Start or from Wait, the same codes as AllReduceSum's. The default runs it now.
  virtual absl::StatusOr<CollectiveTicket> StartAllReduceSum(float* data, size_t n,
                                                             const CollectiveOptions& options) {
    absl::Status status = AllReduceSum(data, n, options);
    if (!status.ok()) return status;
    return CollectiveTicket{0};
  }
  // Ends the all-reduce `ticket` and every one started before it: on CPU it blocks until
  // they are done (each bounded by its options.timeout) and returns the first error among
  // them that no earlier Wait returned; on CUDA it makes the caller's stream wait for them
  // (their errors then come from the backend's Synchronize). Every started ticket must be
  // waited for (a later ticket's Wait covers it) before its data is freed.
  virtual absl::Status Wait(CollectiveTicket ticket) { return absl::OkStatus(); }

  // Reduces n int64s (in the backend's memory, as AllReduceSum's floats) across all ranks
  // with `op`, in place, behind every all-reduce issued before it; every rank ends with
  // the same values, whatever the grouping. kSum must not overflow (callers bound it:
  // exact_sum.h). The same errors as AllReduceSum's; UNIMPLEMENTED (the default) for a
  // collective without integer reductions.
  virtual absl::Status AllReduceInt64(int64_t* data, size_t n, ReduceOp op,
                                      const CollectiveOptions& options) {
    return absl::UnimplementedError(Name() + ": no int64 all-reduce");
  }

  // Whether AllReduceBy runs `total` contributions in ranges aligned to `align`: the same
  // answer on every rank of the collective. False by default.
  virtual bool CanAllReduceBy(int total, size_t align) const { return false; }
  // Every rank hands in its `local` contributions (at least one; the ranks' counts add up
  // to r.total) of n floats each (host memory); each range of a partition of the n
  // elements is reduced once, on one rank, by r.reduce from every rank's contributions to
  // it, and every rank ends with all n results in `out` (which may be one of `local`).
  // Every rank must call with the same n and r, in the same order. The same errors as
  // AllReduceSum's; INVALID_ARGUMENT where the ranks' counts do not add up to r.total;
  // UNIMPLEMENTED (the default) where CanAllReduceBy is false.
  virtual absl::Status AllReduceBy(std::span<const float* const> local, size_t n, float* out,
                                   const ChunkReduction& r, const CollectiveOptions& options) {
    return absl::UnimplementedError(Name() + ": no reduction by a function");
  }
  // AllReduceBy started as StartAllReduceSum starts AllReduceSum: `local` and `out` stay
  // untouched until Wait on the ticket (or a later one) has returned. The default runs it
  // now.
  virtual absl::StatusOr<CollectiveTicket> StartAllReduceBy(std::span<const float* const> local,
                                                            size_t n, float* out,
                                                            const ChunkReduction& r,
                                                            const CollectiveOptions& options) {
    absl::Status status = AllReduceBy(local, n, out, r, options);
    if (!status.ok()) return status;
    return CollectiveTicket{0};
  }

  // Gives up on the collective: one in flight on another thread fails promptly, every
  // later one fails at once, and the peers' fail too instead of waiting out their
  // timeouts; the errors carry `why`. Thread-safe; for a job cancelled or released while
  // a step waits for a peer that will never come.
  virtual void Abort(const absl::Status& why) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_COLLECTIVE_H_
