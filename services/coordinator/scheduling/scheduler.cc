// Scheduling policy: which queued jobs start now, and on which workers. Contract: scheduler.h.
#include "services/coordinator/scheduling/scheduler.h"

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

Schedule PlanSchedule(const std::vector<JobDemand>& arrivals,
                      const std::vector<WorkerView>& workers,
                      std::map<std::string, OwnerSlots> owners) {
  std::vector<JobDemand> queue = arrivals;
  std::stable_sort(queue.begin(), queue.end(),
                   [](const JobDemand& a, const JobDemand& b) { return a.priority > b.priority; });
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
      out.blocked = job.id;
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

std::optional<Preemption> PlanPreemption(const JobDemand& job,
                                         const std::vector<RunningJob>& running,
                                         const std::vector<WorkerView>& workers) {
  std::map<std::string, const WorkerView*> by_id;
  int free = 0;
  for (const WorkerView& w : workers) {
    by_id[w.id] = &w;
    if (w.free && Suits(w, job)) ++free;
  }
  const int need = (job.min_workers > 0 ? job.min_workers : job.workers) - free;
  if (need <= 0) return std::nullopt;
  // Each lower-priority job's suitable workers, last ranks first (rank 0 stays).
  struct Donor {
    const RunningJob* job;
    std::vector<std::string> suitable;
    int spare = 0;  // what it gives shrinking to its min
  };
  std::vector<Donor> elastic, others;
  for (const RunningJob& r : running) {
    if (r.priority >= job.priority) continue;  // never an equal or higher priority
    Donor d{&r, {}, 0};
    for (auto it = r.worker_ids.rbegin(); it != r.worker_ids.rend(); ++it) {
      auto w = by_id.find(*it);
      if (w != by_id.end() && Suits(*w->second, job)) d.suitable.push_back(*it);
    }
    if (d.suitable.empty()) continue;
    if (r.min_workers > 0) {
      const int above_min = static_cast<int>(r.worker_ids.size()) - r.min_workers;
      d.spare = std::min(above_min, static_cast<int>(d.suitable.size()));
      if (d.spare > 0) elastic.push_back(d);
    } else if (r.suspendable) {
      others.push_back(d);
    }
  }
  auto lowest_then_most = [](auto count) {
    return [count](const Donor& a, const Donor& b) {
      if (a.job->priority != b.job->priority) return a.job->priority < b.job->priority;
      return count(a) > count(b);
    };
  };
  std::stable_sort(elastic.begin(), elastic.end(),
                   lowest_then_most([](const Donor& d) { return d.spare; }));
  std::stable_sort(others.begin(), others.end(), lowest_then_most([](const Donor& d) {
                     return static_cast<int>(d.suitable.size());
                   }));
  int elastic_spare = 0;
  for (const Donor& d : elastic) elastic_spare += d.spare;
  Preemption plan;
  plan.job_id = job.id;
  int still = need;
  // Suspensions only for what shrinking cannot give; shrinks then for what they leave.
  for (const Donor& d : others) {
    if (still <= elastic_spare) break;
    plan.suspend.push_back(d.job->id);
    still -= static_cast<int>(d.suitable.size());
  }
  if (still > elastic_spare) return std::nullopt;
  for (const Donor& d : elastic) {
    if (still <= 0) break;
    const int take = std::min(d.spare, still);
    plan.shrink.push_back({d.job->id, {d.suitable.begin(), d.suitable.begin() + take}});
    still -= take;
  }
  return plan;
}

}  // namespace lockstep
