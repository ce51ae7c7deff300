#include "services/coordinator/scheduling/job_manager_testing.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"

namespace lockstep::testing {

absl::StatusOr<v1::JobEvent> AwaitEvent(JobManager& jobs, const std::string& id,
                                        absl::Duration timeout,
                                        const std::function<bool(const v1::JobEvent&)>& done,
                                        std::vector<v1::JobEvent>* seen) {
  ASSIGN_OR_RETURN(std::unique_ptr<JobManager::Watch> watch, jobs.StartWatch(id));
  // Shared with the wake-up, which may run once more after the handle is dropped.
  struct Woken {
    absl::Mutex mu;
    bool woke ABSL_GUARDED_BY(mu) = false;
  };
  auto woken = std::make_shared<Woken>();
  EventLog::Wake wake = watch->log()->Subscribe([woken] {
    absl::MutexLock lock(&woken->mu);
    woken->woke = true;
  });
  const absl::Time end = absl::Now() + timeout;
  for (int64_t cursor = 0;;) {
    EventLog::Batch b = watch->log()->Read(cursor, 0, 0, 1000);
    cursor = b.next;
    for (const v1::JobEvent& e : b.events) {
      if (seen != nullptr) seen->push_back(e);
      if (done(e)) return e;
    }
    if (b.closed) return absl::NotFoundError(absl::StrCat(id, " ended"));
    absl::MutexLock lock(&woken->mu);
    if (!woken->mu.AwaitWithDeadline(absl::Condition(&woken->woke), end)) {
      return absl::DeadlineExceededError(absl::StrCat(id, ": no such event in time"));
    }
    woken->woke = false;
  }
}

absl::StatusOr<v1::Job> AwaitEnd(JobManager& jobs, const std::string& id, absl::Duration timeout,
                                 std::vector<v1::JobEvent>* seen) {
  const absl::StatusOr<v1::JobEvent> none = AwaitEvent(
      jobs, id, timeout, [](const v1::JobEvent&) { return false; }, seen);
  if (absl::IsDeadlineExceeded(none.status())) {
    return absl::DeadlineExceededError(absl::StrCat(id, " did not end"));
  }
  if (!absl::IsNotFound(none.status())) return none.status();  // StartWatch's
  return jobs.Get(id);
}

absl::StatusOr<v1::Job> AwaitState(JobManager& jobs, const std::string& id, v1::JobState state,
                                   absl::Duration timeout) {
  const absl::StatusOr<v1::JobEvent> seen = AwaitEvent(jobs, id, timeout, [state](const auto& e) {
    return e.has_state() && e.state().state() == state;
  });
  if (absl::IsNotFound(seen.status())) {
    return absl::NotFoundError(absl::StrCat(id, " ended before ", v1::JobState_Name(state)));
  }
  if (absl::IsDeadlineExceeded(seen.status())) {
    return absl::DeadlineExceededError(
        absl::StrCat(id, " did not reach ", v1::JobState_Name(state)));
  }
  RETURN_IF_ERROR(seen.status());
  return jobs.Get(id);
}

}  // namespace lockstep::testing
