// CheckpointRetrier: writes the final checkpoints that a full disk refused
// (PendingCheckpoint), on a thread of its own with backoff (kFirstRetry, doubling up to
// kLastRetry), and at once when asked (GetCheckpoint, `lockstep checkpoint`). Each one
// written is reported to `written`, and forgotten.
//
// Thread safety: thread-safe. `written` runs on the retry thread or TryNow's caller,
// without the retrier's lock. The destructor stops the thread (bounded: it waits on a
// condition with a deadline) and joins it; nothing is lost, as each state is also in its
// job's newest snapshot.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_STORAGE_CHECKPOINT_RETRIER_H_
#define LOCKSTEP_SERVICES_COORDINATOR_STORAGE_CHECKPOINT_RETRIER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/coordinator/storage/pending_checkpoint.h"

namespace lockstep {

class CheckpointRetrier {
 public:
  static constexpr absl::Duration kFirstRetry = absl::Seconds(1);
  static constexpr absl::Duration kLastRetry = absl::Minutes(5);

  using Written = std::function<void(const std::string& job_id, const std::string& path)>;
  using Failed = std::function<void(const std::string& job_id, const absl::Status& why)>;
  // `now` is the clock the backoff is measured by (tests give their own and call
  // RetryDue). `failed` hears of the first failure after each success or Add.
  CheckpointRetrier(Written written, Failed failed, std::function<absl::Time()> now = absl::Now);
  ~CheckpointRetrier();

  // Keeps `pending` and tries it after kFirstRetry.
  void Add(std::shared_ptr<PendingCheckpoint> pending);
  // Tries job `job_id`'s checkpoint now: OK when written (or none is pending), else why not.
  absl::Status TryNow(const std::string& job_id);
  // Tries every checkpoint whose retry is due by `now`.
  void RetryDue();
  // Whether job `job_id` has a checkpoint pending.
  bool Pending(const std::string& job_id) const;

 private:
  struct Entry {
    std::shared_ptr<PendingCheckpoint> pending;
    absl::Duration backoff = kFirstRetry;
    absl::Time next;
  };
  void Loop();
  // Tries `e` (taken out of entries_), then puts it back with a longer backoff or reports it.
  absl::Status Try(Entry e);

  const Written written_;
  const Failed failed_;
  const std::function<absl::Time()> now_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_STORAGE_CHECKPOINT_RETRIER_H_
