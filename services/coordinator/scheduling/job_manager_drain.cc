// JobManager::Drain, the graceful stop (SIGTERM): every running job snapshots at its next
// step boundary and is recorded to continue; those that reach none in time are aborted, to
// continue from their previous snapshot; then the watchers are told.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_internal.h"

namespace lockstep {
using job_manager_internal::Stopping;

bool JobManager::SettledLocked() const {
  for (const auto& [id, rec] : jobs_) {
    if (rec->thread.joinable() || rec->pending_saves > 0) return false;
  }
  return true;
}

absl::Status JobManager::Drain(absl::Time deadline) {
  const absl::Time start = absl::Now();
  // The runners' share of the grace period; the rest is for the aborted to end and write.
  const absl::Time abort_at = start + std::max(absl::ZeroDuration(), deadline - start) * 3 / 4;
  auto settled = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return SettledLocked(); };
  std::vector<std::string> aborted;
  absl::MutexLock lock(&mu_);
  stopping_ = true;  // no submit, no start, no replacement workers; waits for them end
  int draining = 0;
  for (auto& [id, rec] : jobs_) {
    if (rec->runner && rec->thread.joinable()) {
      rec->runner->Drain();
      ++draining;
    }
  }
  spdlog::info("draining: {} running job(s) snapshot and stop", draining);
  if (!mu_.AwaitWithDeadline(absl::Condition(&settled), abort_at)) {
    for (auto& [id, rec] : jobs_) {
      if (!rec->runner || !rec->thread.joinable()) continue;
      rec->runner->Abort(Stopping(" (drain) and the job reached no step boundary in time"));
      aborted.push_back(id);
    }
    mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);
  }
  // Watchers end now, saying why, rather than when the server's shutdown cuts them off.
  const absl::Status why = Stopping(" (drain); watch again then");
  for (auto& [id, rec] : jobs_) {
    rec->log->Interrupt(why);
    rec->logs->Interrupt(why);
  }
  spdlog::info("drained in {}", absl::FormatDuration(absl::Now() - start));
  if (aborted.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat("no step boundary within the grace period for ",
                                                  absl::StrJoin(aborted, ", "),
                                                  " (they continue from their previous snapshot)"));
}

}  // namespace lockstep
