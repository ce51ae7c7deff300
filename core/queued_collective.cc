// QueuedCollective: the overlap of collective.h for a collective whose all-reduce blocks its caller
// (Gloo). Contract: queued_collective.h.
#include "core/queued_collective.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// Past the all-reduces' own timeouts, what a Wait allows for the threads' scheduling.
constexpr absl::Duration kWaitSlack = absl::Seconds(1);

}  // namespace

QueuedCollective::QueuedCollective(std::unique_ptr<Collective> inner) : inner_(std::move(inner)) {}

QueuedCollective::~QueuedCollective() {
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    thread = std::move(thread_);
    changed_.SignalAll();
  }
  if (thread.joinable()) thread.join();
}

absl::Status QueuedCollective::Run(const Op& op) {
  switch (op.kind) {
    case Kind::kInt64:
      return inner_->AllReduceInt64(static_cast<int64_t*>(op.data), op.n, op.op, op.options);
    case Kind::kBy:
      return inner_->AllReduceBy(op.local, op.n, static_cast<float*>(op.data), *op.by, op.options);
    case Kind::kSum:
      break;
  }
  return inner_->AllReduceSum(static_cast<float*>(op.data), op.n, op.options);
}

void QueuedCollective::Done(CollectiveTicket ticket, absl::Status status) {
  running_ = false;
  done_ = ticket;
  if (!status.ok()) failed_.emplace(ticket, std::move(status));
  changed_.SignalAll();
}

void QueuedCollective::RunNext() {
  const Op op = std::move(queue_.front());
  queue_.pop_front();
  running_ = true;
  running_timeout_ = op.options.timeout;
  mu_.Unlock();
  absl::Status status = Run(op);
  mu_.Lock();
  Done(op.ticket, std::move(status));
}

void QueuedCollective::Loop() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    while (!((!queue_.empty() && !running_) || (stop_ && queue_.empty()))) changed_.Wait(&mu_);
    if (queue_.empty()) return;  // stopping, and nothing left
    RunNext();
  }
}

QueuedCollective::Op QueuedCollective::ByOp(std::span<const float* const> local, size_t n,
                                            float* out, const ChunkReduction& r,
                                            const CollectiveOptions& options) {
  return {0,
          out,
          n,
          options,
          Kind::kBy,
          ReduceOp::kSum,
          {local.begin(), local.end()},
          std::make_shared<const ChunkReduction>(r)};
}

CollectiveTicket QueuedCollective::Enqueue(Op op) {
  op.ticket = ++issued_;
  queue_.push_back(std::move(op));
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  changed_.SignalAll();
  return issued_;
}

absl::StatusOr<CollectiveTicket> QueuedCollective::StartAllReduceSum(
    float* data, size_t n, const CollectiveOptions& options) {
  absl::MutexLock lock(&mu_);
  return Enqueue({0, data, n, options});
}

absl::StatusOr<CollectiveTicket> QueuedCollective::StartAllReduceBy(
    std::span<const float* const> local, size_t n, float* out, const ChunkReduction& r,
    const CollectiveOptions& options) {
  absl::MutexLock lock(&mu_);
  return Enqueue(ByOp(local, n, out, r, options));
}

absl::Status QueuedCollective::AllReduceBy(std::span<const float* const> local, size_t n,
                                           float* out, const ChunkReduction& r,
                                           const CollectiveOptions& options) {
  return RunSynchronously(ByOp(local, n, out, r, options));
}

absl::Status QueuedCollective::Wait(CollectiveTicket ticket) {
  absl::MutexLock lock(&mu_);
  if (ticket > issued_) {
    return absl::InvalidArgumentError(absl::StrCat(inner_->Name(), ": all-reduce ticket ", ticket,
                                                   " was never issued (last: ", issued_, ")"));
  }
  // Each all-reduce up to `ticket` ends within its own timeout: the wait is bounded by
  // theirs, so that an inner collective that overruns one is an error, never a hang.
  absl::Duration budget = kWaitSlack + (running_ ? running_timeout_ : absl::ZeroDuration());
  for (const Op& op : queue_) {
    if (op.ticket <= ticket) budget += op.options.timeout;
  }
  const absl::Time deadline = absl::Now() + budget;
  while (done_ < ticket) {
    if (running_ || queue_.empty()) {
      if (changed_.WaitWithDeadline(&mu_, deadline) && done_ < ticket) {
        return absl::DeadlineExceededError(
            absl::StrCat(inner_->Name(), ": all-reduce ", ticket, " did not end within ",
                         absl::FormatDuration(budget), ", its and the queued ones' timeouts"));
      }
      continue;
    }
    // The next one is due and the thread has not taken it yet (on a loaded machine it may
    // not run for a while): run it here instead, still one at a time and in order.
    RunNext();
  }
  absl::Status first;
  for (auto it = failed_.begin(); it != failed_.end() && it->first <= ticket;) {
    if (first.ok()) first = it->second;
    it = failed_.erase(it);
  }
  return first;
}

absl::Status QueuedCollective::AllReduceSum(float* data, size_t n,
                                            const CollectiveOptions& options) {
  return RunSynchronously({0, data, n, options});
}

absl::Status QueuedCollective::AllReduceInt64(int64_t* data, size_t n, ReduceOp op,
                                              const CollectiveOptions& options) {
  return RunSynchronously({0, data, n, options, Kind::kInt64, op});
}

absl::Status QueuedCollective::RunSynchronously(Op op) {
  CollectiveTicket ticket;
  {
    absl::MutexLock lock(&mu_);
    if (!queue_.empty() || running_) {
      // Behind started all-reduces: the thread runs it in its turn.
      ticket = op.ticket = ++issued_;
      queue_.push_back(std::move(op));
      changed_.SignalAll();
    } else {
      ticket = 0;
      running_ = true;  // nothing ahead: run it here, on the caller's thread
      running_timeout_ = op.options.timeout;
    }
  }
  if (ticket != 0) return Wait(ticket);
  absl::Status status = Run(op);
  absl::MutexLock lock(&mu_);
  running_ = false;  // done_ stays: this call took no ticket
  changed_.SignalAll();
  return status;
}

void QueuedCollective::Abort(const absl::Status& why) { inner_->Abort(why); }

bool QueuedCollective::AwaitIssued(CollectiveTicket ticket, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const auto issued = [this, ticket]()
                          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return issued_ >= ticket; };
  return mu_.AwaitWithTimeout(absl::Condition(&issued), timeout);
}

}  // namespace lockstep
