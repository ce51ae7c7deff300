// JobManager's priorities (JobSpec.priority): a queued job held back because workers are
// busy takes them from running jobs of lower priority (PlanPreemption, scheduler.h).
// Elastic jobs give workers down to their min at their next step boundary and go on
// smaller (JobRunner::ReleaseWorkers: "resized 3 -> 1 workers: workers ... preempted by
// job X (priority P)"); they grow back through WorkerSupply::Offer once no job waits.
// Others are suspended: a snapshot at their next step boundary, SUSPENDED, then back in
// the queue to continue from that snapshot bit for bit when workers are free.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/spec/spec.h"
#include "services/common/observability/job_log.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_internal.h"

namespace lockstep {

void JobManager::PreemptLocked(const std::string& blocked, const std::vector<JobDemand>& demands) {
  const absl::Time now = options_.clock->Now();
  if (preempting_for_ == blocked && now < preempt_until_) return;  // workers on their way
  auto demand = std::find_if(demands.begin(), demands.end(),
                             [&](const JobDemand& d) { return d.id == blocked; });
  if (demand == demands.end()) return;
  std::vector<RunningJob> running;
  for (const auto& [id, rec] : jobs_) {
    if (!rec->runner || rec->job.state() != v1::RUNNING || rec->cancelled ||
        !rec->suspending.empty()) {
      continue;
    }
    const v1::JobSpec& spec = rec->job.spec();
    running.push_back({id,
                       spec.priority(),
                       spec.replicas() > 0 ? MinWorkers(spec) : 0,
                       true,
                       {rec->job.workers().begin(), rec->job.workers().end()}});
  }
  const std::optional<Preemption> plan = PlanPreemption(*demand, running, pool_->Views());
  if (!plan.has_value()) return;
  const std::string why =
      absl::StrCat("preempted by job ", blocked, " (priority ", demand->priority, ")");
  for (const auto& [id, workers] : plan->shrink) {
    LogJob(spdlog::level::info, {id},
           absl::StrCat(why, ": workers ", absl::StrJoin(workers, ", "),
                        " leave at the next step boundary"));
    jobs_[id]->runner->ReleaseWorkers(workers, why);
    metrics_->Preempted(false);
  }
  for (const std::string& id : plan->suspend) SuspendLocked(*jobs_[id], why);
  preempting_for_ = blocked;
  preempt_until_ = now + absl::Minutes(1);
}

void JobManager::SuspendLocked(Record& rec, const std::string& why) {
  LogJob(spdlog::level::info, {rec.job.id()},
         absl::StrCat(why, ": the job snapshots at its next step boundary and is suspended"));
  rec.suspending = why;
  rec.runner->Drain(absl::StrCat("suspended: ", why));
  metrics_->Preempted(true);
}

void JobManager::RequeueLocked(Record& rec) {
  rec.requeue = false;
  rec.suspending.clear();
  rec.resume = true;  // from its newest snapshot; the steps up to here are replays
  rec.high_water = std::max(rec.high_water, rec.job.step());
  const std::string& id = rec.job.id();
  // Arrival order (ids are numbered in submission order).
  auto at = std::find_if(queue_.begin(), queue_.end(),
                         [&](const std::string& other) { return other > id; });
  queue_.insert(at, id);
  kicked_ = true;
}

}  // namespace lockstep
