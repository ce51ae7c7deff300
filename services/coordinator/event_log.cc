#include "services/coordinator/event_log.h"

#include <algorithm>

namespace lockstep {
namespace {

// What an entry costs besides its message.
constexpr size_t kEntryOverhead = 64;

int64_t StepOf(const v1::JobEvent& e) {
  if (e.has_step()) return e.step().step();
  if (e.has_eval()) return e.eval().step();
  return -1;
}

}  // namespace

void EventLog::Append(v1::JobEvent event) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    const size_t bytes = event.ByteSizeLong() + kEntryOverhead;
    const int64_t step = StepOf(event);
    entries_.push_back({next_seq_++, step, bytes, std::move(event)});
    bytes_ += bytes;
    // Over budget: the oldest step events (or log lines) go first.
    for (auto it = entries_.begin(); bytes_ > budget_ && it != entries_.end();) {
      if (it->event.has_step() || it->event.has_log()) {
        bytes_ -= it->bytes;
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }
  Changed();
}

void EventLog::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
  }
  Changed();
}

void EventLog::Interrupt(absl::Status why) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    interrupted_ = why.ok() ? absl::UnavailableError("the event log was interrupted") : why;
  }
  Changed();
}

void EventLog::Compact() {
  absl::MutexLock lock(&mu_);
  std::erase_if(entries_, [this](const Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!e.event.has_step()) return false;
    bytes_ -= e.bytes;
    return true;
  });
}

EventLog::Batch EventLog::Read(int64_t cursor, int64_t from_step, int64_t replay_until, size_t max,
                               int64_t stop_at) const {
  absl::MutexLock lock(&mu_);
  Batch out;
  auto it = std::lower_bound(entries_.begin(), entries_.end(), cursor,
                             [](const Entry& e, int64_t seq) { return e.seq < seq; });
  for (; it != entries_.end() && it->seq < stop_at && out.events.size() < max; ++it) {
    const bool history = it->seq < replay_until;
    if (!history || it->step < 0 || it->step >= from_step) out.events.push_back(it->event);
  }
  out.next = it == entries_.end() ? next_seq_ : it->seq;
  out.closed = (closed_ && it == entries_.end()) || out.next >= stop_at;
  if (closed_ && it == entries_.end()) out.interrupted = interrupted_;
  return out;
}

int64_t EventLog::end() const {
  absl::MutexLock lock(&mu_);
  return next_seq_;
}

size_t EventLog::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

EventLog::Wake EventLog::Subscribe(std::function<void()> wake) {
  auto w = std::make_shared<const std::function<void()>>(std::move(wake));
  absl::MutexLock lock(&mu_);
  std::erase_if(wakes_, [](const auto& weak) { return weak.expired(); });
  wakes_.push_back(w);
  return w;
}

void EventLog::Changed() {
  if (notifier_ == nullptr) return Notify();
  {
    absl::MutexLock lock(&mu_);
    if (notify_posted_) return;  // the one posted sees this change too
    notify_posted_ = true;
  }
  notifier_->Post([weak = weak_from_this()] {
    if (std::shared_ptr<EventLog> log = weak.lock()) log->Notify();
  });
}

void EventLog::Notify() {
  std::vector<std::shared_ptr<const std::function<void()>>> live;
  {
    absl::MutexLock lock(&mu_);
    notify_posted_ = false;
    for (const auto& weak : wakes_) {
      if (auto w = weak.lock()) live.push_back(std::move(w));
    }
  }
  for (const auto& w : live) (*w)();
}

}  // namespace lockstep
