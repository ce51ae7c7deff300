// CheckpointRetrier: writes the final checkpoints that a full disk refused, with backoff, on a
// thread of its own. Contract: checkpoint_retrier.h.
#include "services/coordinator/storage/checkpoint_retrier.h"

#include <algorithm>
#include <vector>

namespace lockstep {
namespace {

// How long the thread sleeps at most between looks (a clock of a test moves by itself).
constexpr absl::Duration kLongestWait = absl::Seconds(1);

}  // namespace

CheckpointRetrier::CheckpointRetrier(Written written, Failed failed,
                                     std::function<absl::Time()> now)
    : written_(std::move(written)), failed_(std::move(failed)), now_(std::move(now)) {
  thread_ = std::thread([this] { Loop(); });
}

CheckpointRetrier::~CheckpointRetrier() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void CheckpointRetrier::Add(std::shared_ptr<PendingCheckpoint> pending) {
  absl::MutexLock lock(&mu_);
  const std::string id = pending->job_id();
  entries_[id] = Entry{std::move(pending), kFirstRetry, now_() + kFirstRetry};
}

absl::Status CheckpointRetrier::TryNow(const std::string& job_id) {
  Entry e;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(job_id);
    if (it == entries_.end()) return absl::OkStatus();
    e = it->second;
  }
  return Try(std::move(e));
}

bool CheckpointRetrier::Pending(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  return entries_.count(job_id) > 0;
}

void CheckpointRetrier::RetryDue() {
  std::vector<Entry> due;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = now_();
    for (const auto& [id, e] : entries_) {
      if (e.next <= now) due.push_back(e);
    }
  }
  for (Entry& e : due) Try(std::move(e)).IgnoreError();
}

absl::Status CheckpointRetrier::Try(Entry e) {
  const absl::Status st = e.pending->Write();  // without mu_: a write may take long
  const std::string& id = e.pending->job_id();
  bool first_failure = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.pending != e.pending) return st;  // reported already
    if (st.ok()) {
      entries_.erase(it);
    } else if (it->second.next == e.next) {  // else another try of the same turn moved it
      first_failure = it->second.backoff == kFirstRetry;
      it->second.backoff = std::min(kLastRetry, 2 * it->second.backoff);
      it->second.next = now_() + it->second.backoff;
    }
  }
  if (st.ok()) {
    written_(id, e.pending->path());
  } else if (first_failure && failed_) {
    failed_(id, st);
  }
  return st;
}

void CheckpointRetrier::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      absl::Duration wait = kLongestWait;
      const absl::Time now = now_();
      for (const auto& [id, e] : entries_) wait = std::min(wait, e.next - now);
      auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&stop), std::max(wait, absl::Milliseconds(1)));
      if (stopping_) return;
    }
    RetryDue();
  }
}

}  // namespace lockstep
