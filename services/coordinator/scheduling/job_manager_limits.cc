// JobManager's use of the per-user limits (user_limits.h) and the global caps: whether an
// owner may queue one more job (AdmitLocked, at submit), and the room each limited owner has
// to start jobs (OwnerSlotsLocked, for the scheduler).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "services/common/rpc/job_state.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_internal.h"
#include "services/coordinator/scheduling/user_limits.h"

namespace lockstep {

absl::Status JobManager::AdmitLocked(const std::string& owner,
                                     std::vector<std::string>* forgotten) {
  const UserLimits& limits = options_.user_limits.For(owner);
  int queued = 0;
  for (const std::string& id : queue_) queued += jobs_[id]->job.owner() == owner;
  if (limits.max_queued_jobs > 0 && queued >= limits.max_queued_jobs) {
    return absl::ResourceExhaustedError(OverLimit(owner, limits, UserLimit::kQueued, queued));
  }
  if (static_cast<int>(queue_.size()) >= options_.max_queued_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat(queue_.size(), " jobs are queued, the coordinator's limit (--max_queued_jobs ",
                     options_.max_queued_jobs, ")"));
  }
  // At the global cap on records, the submitter's own oldest finished job makes room.
  auto room = jobs_.end();
  if (static_cast<int>(jobs_.size()) >= options_.max_jobs_kept) {
    room = std::find_if(jobs_.begin(), jobs_.end(), [&](const auto& e) {
      return e.second->job.owner() == owner && ForgettableLocked(*e.second);
    });
    if (room == jobs_.end()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the coordinator keeps ", jobs_.size(), " job records (limit --max_jobs_kept ",
          options_.max_jobs_kept, "), none of them a finished job of user ", owner));
    }
  }
  if (limits.submits_per_minute > 0) {
    const absl::Time now = options_.clock->Now();
    auto bucket = submit_rate_.try_emplace(owner, limits.submits_per_minute, now).first;
    absl::Duration wait;
    if (!bucket->second.TryTake(now, &wait)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          OverLimit(owner, limits, UserLimit::kSubmitsPerMinute, limits.submits_per_minute),
          "; the next one in ", absl::FormatDuration(wait)));
    }
  }
  if (room != jobs_.end()) forgotten->push_back(ForgetLocked(room));
  return absl::OkStatus();
}

std::map<std::string, OwnerSlots> JobManager::OwnerSlotsLocked() const {
  std::map<std::string, OwnerSlots> slots;  // the limited owners of queued jobs
  for (const std::string& id : queue_) {
    const std::string& owner = jobs_.at(id)->job.owner();
    if (options_.user_limits.For(owner).max_running_jobs > 0) slots[owner];
  }
  if (slots.empty()) return slots;
  std::map<std::string, int> running;
  for (const auto& [id, rec] : jobs_) {
    const v1::JobState state = rec->job.state();
    if (state == v1::RUNNING || state == v1::RECOVERING) ++running[rec->job.owner()];
  }
  for (auto& [owner, s] : slots) {
    const UserLimits& limits = options_.user_limits.For(owner);
    s.free = limits.max_running_jobs - running[owner];
    s.why = OverLimit(owner, limits, UserLimit::kRunning, running[owner]);
  }
  return slots;
}

}  // namespace lockstep
