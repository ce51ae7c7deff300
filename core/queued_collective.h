// QueuedCollective: the overlap of collective.h for a collective whose all-reduce blocks
// its caller (Gloo). It wraps that collective and owns a communication thread: started
// all-reduces queue in a FIFO that the thread runs one at a time, in issue order, so the
// caller's thread computes on meanwhile (a step's backward pass). The synchronous
// AllReduceSum goes through the same FIFO and waits for its turn (it runs on the calling
// thread when nothing is queued or running), so the inner collective never sees two calls
// at once and every rank runs its all-reduces in the order it issued them. A Wait that
// finds the next all-reduce due but not yet taken by the thread runs it itself (the
// thread may be waiting for a core), so waiting never adds a thread handoff.
//
// Errors and aborts: each all-reduce keeps the inner collective's timeout and errors, so a
// dead peer is an error within it, never a hang. Abort is the inner collective's: the
// all-reduce in flight fails as it makes it, and the queued ones, which still go through
// the inner collective, fail at once as its later calls do (GlooCollective's do). Thread
// safety: any thread may call any method; one thread at a time should start and wait (the
// step's), so that tickets mean one sequence.
#ifndef LOCKSTEP_CORE_QUEUED_COLLECTIVE_H_
#define LOCKSTEP_CORE_QUEUED_COLLECTIVE_H_

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/collective.h"

namespace lockstep {

class QueuedCollective final : public Collective {
 public:
  explicit QueuedCollective(std::unique_ptr<Collective> inner);
  // Lets the queued all-reduces finish (each bounded by its timeout), then ends the thread.
  ~QueuedCollective() override;

  std::string Name() const override { return inner_->Name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }

  absl::Status AllReduceSum(float* data, size_t n, const CollectiveOptions& options) override;
  // Tickets start at 1. Wait: INVALID_ARGUMENT for a ticket not yet issued; Wait(0) is a
  // no-op; DEADLINE_EXCEEDED when the all-reduces up to the ticket took longer than their
  // timeouts together (and a second): an inner collective that overran one.
  absl::StatusOr<CollectiveTicket> StartAllReduceSum(float* data, size_t n,
                                                     const CollectiveOptions& options) override;
  absl::Status Wait(CollectiveTicket ticket) override;
  // Synchronous, through the FIFO as AllReduceSum.
  absl::Status AllReduceInt64(int64_t* data, size_t n, ReduceOp op,
                              const CollectiveOptions& options) override;
  // The inner collective's; AllReduceBy and StartAllReduceBy go through the FIFO as
  // AllReduceSum and StartAllReduceSum.
  bool CanAllReduceBy(int total, size_t align) const override {
    return inner_->CanAllReduceBy(total, align);
  }
  absl::Status AllReduceBy(std::span<const float* const> local, size_t n, float* out,
                           const ChunkReduction& r, const CollectiveOptions& options) override;
  absl::StatusOr<CollectiveTicket> StartAllReduceBy(std::span<const float* const> local, size_t n,
                                                    float* out, const ChunkReduction& r,
                                                    const CollectiveOptions& options) override;
  void Abort(const absl::Status& why) override;

  // Blocks until `ticket` has been issued (by StartAllReduceSum, or to a synchronous
  // AllReduceSum queued behind others) or `timeout` has passed; whether it was. For a
  // thread that must order itself after another thread's queued call (tests).
  bool AwaitIssued(CollectiveTicket ticket, absl::Duration timeout);

 private:
  enum class Kind { kSum, kInt64, kBy };  // AllReduceSum, AllReduceInt64, AllReduceBy
  struct Op {
    CollectiveTicket ticket;
    void* data;  // float* for a float sum or AllReduceBy's out, int64_t* for an integer one
    size_t n;
    CollectiveOptions options;
    Kind kind = Kind::kSum;
    ReduceOp op = ReduceOp::kSum;              // kInt64's
    std::vector<const float*> local;           // kBy's contributions
    std::shared_ptr<const ChunkReduction> by;  // kBy's reduction
  };
  // An AllReduceBy's op, holding copies of `local` and `r`.
  static Op ByOp(std::span<const float* const> local, size_t n, float* out, const ChunkReduction& r,
                 const CollectiveOptions& options);
  // Queues `op` under a new ticket (starting the thread); its ticket.
  CollectiveTicket Enqueue(Op op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `op` (ticket ignored) in its turn: on the calling thread when nothing is queued
  // or running, else behind the queue.
  absl::Status RunSynchronously(Op op);
  void Loop();  // the communication thread
  // Runs the queue's first all-reduce on the calling thread (the lock released meanwhile).
  void RunNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Run(const Op& op);  // calls the inner collective
  void Done(CollectiveTicket ticket, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<Collective> inner_;
  absl::Mutex mu_;
  absl::CondVar changed_;  // signalled when queue_, running_, done_ or stop_ change
  std::deque<Op> queue_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;            // an all-reduce is in the inner collective
  absl::Duration running_timeout_ ABSL_GUARDED_BY(mu_);  // that one's
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  CollectiveTicket issued_ ABSL_GUARDED_BY(mu_) = 0;  // the last ticket handed out
  CollectiveTicket done_ ABSL_GUARDED_BY(mu_) = 0;    // every ticket up to it has ended
  // Failures no Wait has returned yet, by ticket.
  std::map<CollectiveTicket, absl::Status> failed_ ABSL_GUARDED_BY(mu_);
  std::thread thread_ ABSL_GUARDED_BY(mu_);  // started by the first StartAllReduceSum
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_QUEUED_COLLECTIVE_H_
