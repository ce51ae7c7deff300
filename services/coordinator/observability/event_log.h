// EventLog: one job's events for WatchJob (or its log lines for WatchLogs): appended by
// the job's runner, read by any number of watchers, each from its own cursor (a sequence
// number), and with a wake-up when more arrive. Bounded by a byte budget: past it the
// oldest step events and log lines go first (state and evaluation events stay), and a
// watcher that fell behind skips them. Once the job has ended (Close) and its watchers
// are gone, Compact replaces its step events with the job's StepHistory (step_history.h):
// a finished job keeps its states, evaluations, log lines and its thinned steps.
//
// Thread-safe. Its lock is a leaf. Wake-ups run without it: on `notifier`'s thread when
// one is given (a job's runner then pays one hand-off per event, however many watch),
// else on the appending thread; they must be quick (they schedule a write; they never
// wait). Create it with std::make_shared when it has a notifier.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_OBSERVABILITY_EVENT_LOG_H_
#define LOCKSTEP_SERVICES_COORDINATOR_OBSERVABILITY_EVENT_LOG_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "lockstep/v1/job.pb.h"
#include "services/common/rpc/serial_executor.h"

namespace lockstep {

class EventLog : public std::enable_shared_from_this<EventLog> {
 public:
  explicit EventLog(size_t byte_budget, SerialExecutor* notifier = nullptr)
      : budget_(byte_budget), notifier_(notifier) {}

  // Appends an event; ignored once closed.
  void Append(v1::JobEvent event);
  // The job ended: no more events.
  void Close();
  // The coordinator is going away (a drain): watchers read what is there, then end with
  // `why` (not OK); nothing is appended after it.
  void Interrupt(absl::Status why);
  // Of a job that ended, once no watcher is behind: drops the step events and puts `kept`
  // (its StepHistory's, ascending) in their place, each list's order kept: a step goes
  // before the evaluations of its step and later ones, and among state events in time
  // (unix_ms; at equal times after a state that is not the log's last, before the last).
  // Events are numbered anew (no cursor into the log survives: no watcher holds one).
  void Compact(std::vector<v1::JobEvent> kept = {});

  struct Batch {
    std::vector<v1::JobEvent> events;
    int64_t next = 0;          // the cursor to read from next
    bool closed = false;       // and nothing more will come after these
    absl::Status interrupted;  // with `closed`: why the log ends before the job (Interrupt)
  };
  // Up to `max` events from `cursor` on. Events before `replay_until` (the history a
  // watcher found when it started) are kept only if they are state events or at or after
  // step `from_step`. Nothing from `stop_at` on is read: the batch that reaches it is
  // `closed` (a watcher of the history only).
  Batch Read(int64_t cursor, int64_t from_step, int64_t replay_until, size_t max,
             int64_t stop_at = std::numeric_limits<int64_t>::max()) const;
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
  // After a change: runs the wake-ups, or has the notifier run them (one task at a time).
  void Changed() ABSL_LOCKS_EXCLUDED(mu_);
  void Notify() ABSL_LOCKS_EXCLUDED(mu_);  // runs the live subscriptions' wake-ups

  const size_t budget_;
  SerialExecutor* const notifier_;
  mutable absl::Mutex mu_;
  std::deque<Entry> entries_ ABSL_GUARDED_BY(mu_);  // ascending seq
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status interrupted_ ABSL_GUARDED_BY(mu_);
  bool notify_posted_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::weak_ptr<const std::function<void()>>> wakes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_OBSERVABILITY_EVENT_LOG_H_
