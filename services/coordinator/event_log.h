// EventLog: one job's events for WatchJob: appended by the job's runner, read by any
// number of watchers, each from its own cursor (a sequence number), and with a wake-up
// when more arrive. Bounded by a byte budget: past it the oldest step events go first
// (state and evaluation events stay), and a watcher that fell behind skips them. Once the
// job has ended (Close) and its watchers are gone, Compact drops its step events: a
// finished job keeps its states and evaluations.
//
// Thread-safe. Its lock is a leaf: wake-ups run after it is released, on the appending
// thread, and must be quick (they schedule a write; they never wait).
#ifndef LOCKSTEP_SERVICES_COORDINATOR_EVENT_LOG_H_
#define LOCKSTEP_SERVICES_COORDINATOR_EVENT_LOG_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "lockstep/v1/job.pb.h"

namespace lockstep {

class EventLog {
 public:
  explicit EventLog(size_t byte_budget) : budget_(byte_budget) {}

  // Appends an event; ignored once closed.
  void Append(v1::JobEvent event);
  // The job ended: no more events.
  void Close();
  // Drops the step events (of a job that ended, once no watcher is behind).
  void Compact();

  struct Batch {
    std::vector<v1::JobEvent> events;
    int64_t next = 0;     // the cursor to read from next
    bool closed = false;  // and nothing more will come after these
  };
  // Up to `max` events from `cursor` on. Events before `replay_until` (the history a
  // watcher found when it started) are kept only if they are state events or at or after
  // step `from_step`.
  Batch Read(int64_t cursor, int64_t from_step, int64_t replay_until, size_t max) const;
  // The sequence number the next event will get.
  int64_t end() const;
  size_t bytes() const;

  // Runs `wake` after every Append and Close until the returned handle is dropped (a wake
  // already under way may still run once after).
  using Wake = std::shared_ptr<const std::function<void()>>;
  [[nodiscard]] Wake Subscribe(std::function<void()> wake);

 private:
  struct Entry {
    int64_t seq;
    int64_t step;  // of a step or evaluation event; -1 for a state event
    size_t bytes;
    v1::JobEvent event;
  };
  void Notify();  // runs the live subscriptions' wake-ups; called without mu_

  const size_t budget_;
  mutable absl::Mutex mu_;
  std::deque<Entry> entries_ ABSL_GUARDED_BY(mu_);  // ascending seq
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::weak_ptr<const std::function<void()>>> wakes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_EVENT_LOG_H_
