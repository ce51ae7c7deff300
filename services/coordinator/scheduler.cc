#include "services/coordinator/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// "2 cpu workers", "2 cpu workers with 4 threads", "1 cpu worker".
std::string Describe(const JobDemand& job, const char* adjective) {
  const int fewest = job.min_workers > 0 ? job.min_workers : job.workers;
  std::string s =
      absl::StrCat(fewest < job.workers ? absl::StrCat(fewest, " to ") : "", job.workers, adjective,
                   " ", job.device, job.workers == 1 ? " worker" : " workers");
  if (job.device == "cpu" && job.threads > 0)
    absl::StrAppend(&s, " with ", job.threads, " threads");
  return s;
}

}  // namespace

bool Suits(const WorkerView& worker, const JobDemand& job) {
  const bool device =
      job.device == "cuda" ? worker.device.rfind("cuda", 0) == 0 : worker.device == job.device;
  return device && (job.device != "cpu" || worker.threads >= job.threads);
}

Schedule PlanSchedule(const std::vector<JobDemand>& queue, const std::vector<WorkerView>& workers,
                      std::map<std::string, OwnerSlots> owners) {
  Schedule out;
  std::vector<bool> taken(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) taken[i] = !workers[i].free;
  bool blocked = false;  // by a job ahead that fits the pool once workers are free
  for (const JobDemand& job : queue) {
    auto owner = job.recovering ? owners.end() : owners.find(job.owner);
    if (owner != owners.end() && owner->second.free <= 0) {  // passed over: it blocks no one
      out.waiting_for[job.id] = owner->second.why;
      continue;
    }
    std::vector<size_t> free;
    int registered = 0;
    for (size_t i = 0; i < workers.size(); ++i) {
      if (!Suits(workers[i], job)) continue;
      ++registered;
      if (!taken[i]) free.push_back(i);
    }
    const int fewest = job.min_workers > 0 ? job.min_workers : job.workers;
    if (registered < fewest) {
      out.waiting_for[job.id] = absl::StrCat(Describe(job, ""), " (", registered, " registered)");
      continue;
    }
    if (blocked) {
      out.waiting_for[job.id] = "the jobs ahead of it in the queue";
      continue;
    }
    if (static_cast<int>(free.size()) < fewest) {
      out.waiting_for[job.id] = Describe(job, " free");
      blocked = true;
      continue;
    }
    const int count = std::min(job.workers, static_cast<int>(free.size()));
    Placement p{job.id, {}};
    for (int r = 0; r < count; ++r) {
      taken[free[r]] = true;
      p.worker_ids.push_back(workers[free[r]].id);
    }
    out.start.push_back(std::move(p));
    if (owner != owners.end()) --owner->second.free;
  }
  return out;
}

}  // namespace lockstep
