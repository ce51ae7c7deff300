// EventLog: one job's events for WatchJob (or its log lines for WatchLogs): appended by the job's
// runner, read by any number of watchers, each from its own cursor (a sequence number), and with a
// wake-up when more arrive. Contract: event_log.h.
#include "services/coordinator/observability/event_log.h"

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

void EventLog::Compact(std::vector<v1::JobEvent> kept) {
  absl::MutexLock lock(&mu_);
  std::deque<Entry> others;
  for (Entry& e : entries_) {
    if (!e.event.has_step()) others.push_back(std::move(e));
  }
  // Whether a kept step goes before the i-th other event: before an evaluation of its step
  // or a later one; before a state event or a log line that is newer, or as old and the
  // log's last state.
  const auto step_first = [&](const v1::JobEvent& step, size_t i) {
    const v1::JobEvent& other = others[i].event;
    if (other.has_eval()) return step.step().step() <= other.eval().step();
    if (step.unix_ms() != other.unix_ms()) return step.unix_ms() < other.unix_ms();
    return other.has_state() && i + 1 == others.size();
  };
  entries_.clear();
  bytes_ = 0;
  int64_t seq = 0;
  const auto push = [&](v1::JobEvent&& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t bytes = e.ByteSizeLong() + kEntryOverhead;
    const int64_t step = StepOf(e);
    entries_.push_back({seq++, step, bytes, std::move(e)});
    bytes_ += bytes;
  };
  size_t k = 0;
  for (size_t i = 0; i < others.size(); ++i) {
    while (k < kept.size() && step_first(kept[k], i)) push(std::move(kept[k++]));
    push(std::move(others[i].event));
  }
  while (k < kept.size()) push(std::move(kept[k++]));
  next_seq_ = std::max(next_seq_, seq);
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
