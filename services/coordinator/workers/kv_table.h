// KvTable: the Rendezvous service's store. Keys live only in namespaces: one per running
// job, opened for each attempt (a prefix with a secret part, and the identities of the
// attempt's workers, the only callers that may write or read it) and closed, with its keys
// deleted, when the next attempt opens or the job ends. Each namespace has its own budget
// (keys and bytes), so that a job filling its own never blocks another job's bootstrap.
// Waits are asynchronous, so that a waiting RPC holds no thread: a waiter is called back
// when its keys are set, when its deadline passes (on the table's one timer thread), when
// it is cancelled, or when its namespace closes.
//
// Thread-safe. Callbacks run without the table's lock held, on the thread that set the
// last key, on the timer thread, or on the one that cancelled or closed; they must not
// block.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_WORKERS_KV_TABLE_H_
#define LOCKSTEP_SERVICES_COORDINATOR_WORKERS_KV_TABLE_H_

#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep {

class KvTable {
 public:
  // The budget of each job's namespace.
  explicit KvTable(size_t max_keys_per_job = 4096, size_t max_bytes_per_job = 4 << 20);
  ~KvTable();  // waiters still pending get UNAVAILABLE

  // Opens job `job_id`'s namespace for a new attempt: keys under `prefix`, for callers in
  // `members` (worker identities; an empty set admits every caller). The job's previous
  // namespace, if any, is closed first (its keys deleted, its waiters ABORTED).
  void Open(const std::string& job_id, const std::string& prefix, std::set<std::string> members);
  // Deletes the job's keys and ends its waiters with ABORTED; nothing if none is open.
  void Close(const std::string& job_id);

  // `caller`: the identity calling (auth.h; "" without TLS). PERMISSION_DENIED for a key in
  // no open namespace or in one `caller` is no member of; RESOURCE_EXHAUSTED naming the
  // job when its namespace is over its keys or bytes (nothing changes then).
  absl::Status Set(const std::string& key, const std::string& value,
                   const std::string& caller = "");
  // NOT_FOUND naming the key; Set's PERMISSION_DENIED.
  absl::StatusOr<std::string> Get(const std::string& key, const std::string& caller = "");

  // Calls `done` exactly once: with the values of `keys` (in order) once all are set, or
  // DEADLINE_EXCEEDED naming the missing keys at `deadline`, or the status given to
  // CancelWait, or ABORTED when their namespace closes, or at once Set's PERMISSION_DENIED
  // (every key must be in one namespace `caller` belongs to). Returns the waiter's id
  // (`done` may have run already).
  using Done = std::function<void(absl::StatusOr<std::vector<std::string>>)>;
  int64_t WaitAsync(std::vector<std::string> keys, absl::Time deadline, Done done,
                    const std::string& caller = "");
  // Ends a pending wait with `why`; nothing if it already ended.
  void CancelWait(int64_t id, absl::Status why);
  size_t waiters();
  size_t keys();  // in all namespaces

 private:
  struct Namespace {
    std::string prefix;
    std::set<std::string> members;
    size_t keys = 0, bytes = 0;
  };
  struct Waiter {
    std::vector<std::string> keys;
    absl::Time deadline;
    Done done;
    std::string job_id;  // whose namespace holds the keys
  };
  // Waiters that can end now, removed from the table, with their outcome.
  using Ready = std::vector<std::pair<Done, absl::StatusOr<std::vector<std::string>>>>;
  // The id of the job whose namespace holds `key`, if `caller` may use it.
  absl::StatusOr<std::string> JobOfLocked(const std::string& key, const std::string& caller)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseLocked(const std::string& job_id, Ready* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CollectLocked(absl::Time now, Ready* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Run(Ready ready);
  void TimerLoop();

  const size_t max_keys_, max_bytes_;
  absl::Mutex mu_;
  std::map<std::string, Namespace> spaces_ ABSL_GUARDED_BY(mu_);  // by job id
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  int64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_WORKERS_KV_TABLE_H_
