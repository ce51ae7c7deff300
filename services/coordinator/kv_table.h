// KvTable: the Rendezvous service's store. Bounded (keys and bytes) so that a
// misbehaving client cannot exhaust the coordinator; a job's keys are dropped when it
// ends. Waits are asynchronous, so that a waiting RPC holds no thread: a waiter is called
// back when its keys are set, when its deadline passes (on the table's one timer thread),
// or when it is cancelled.
//
// Thread-safe. Callbacks run without the table's lock held, on the thread that set the
// last key, on the timer thread, or on the one that cancelled; they must not block.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_KV_TABLE_H_
#define LOCKSTEP_SERVICES_COORDINATOR_KV_TABLE_H_

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep {

class KvTable {
 public:
  explicit KvTable(size_t max_keys = 100000, size_t max_bytes = 64 << 20);
  ~KvTable();  // waiters still pending get UNAVAILABLE

  // RESOURCE_EXHAUSTED when over the limits.
  absl::Status Set(const std::string& key, const std::string& value);
  // NOT_FOUND naming the key.
  absl::StatusOr<std::string> Get(const std::string& key);
  void ErasePrefix(const std::string& prefix);

  // Calls `done` exactly once: with the values of `keys` (in order) once all are set, or
  // DEADLINE_EXCEEDED naming the missing keys at `deadline`, or the status given to
  // CancelWait. Returns the waiter's id (`done` may have run already).
  using Done = std::function<void(absl::StatusOr<std::vector<std::string>>)>;
  int64_t WaitAsync(std::vector<std::string> keys, absl::Time deadline, Done done);
  // Ends a pending wait with `why`; nothing if it already ended.
  void CancelWait(int64_t id, absl::Status why);
  size_t waiters();

 private:
  struct Waiter {
    std::vector<std::string> keys;
    absl::Time deadline;
    Done done;
  };
  // Waiters that can end now, removed from the table, with their outcome.
  using Ready = std::vector<std::pair<Done, absl::StatusOr<std::vector<std::string>>>>;
  void CollectLocked(absl::Time now, Ready* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Run(Ready ready);
  void TimerLoop();

  const size_t max_keys_, max_bytes_;
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  int64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_KV_TABLE_H_
