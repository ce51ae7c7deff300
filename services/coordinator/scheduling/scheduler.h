// Scheduling policy: which queued jobs start now, and on which workers. A pure function
// of the queue and the pool's workers, unit-tested on its own; the JobManager applies
// its decisions (WorkerPool::Assign).
//
// Higher priority first (JobSpec.priority), then first come, first served (jobs
// recovering lost workers before all: they held workers already): a job that the
// registered workers could run, but the free ones cannot yet, holds back the jobs behind it, so
// that a big job is not starved by small ones; a job that needs more workers of its kind than are
// registered at all is passed over (nothing would ever free them) until enough register. A worker
// suits a job when its device matches ("cpu", or "cuda" for any "cuda:K") and, for a CPU job asking
// for `threads`, it has at least that many. An owner at their running-jobs limit
// (OwnerSlots) has their queued jobs passed over: they hold back nobody else's.
//
// Preemption (PlanPreemption): the job that holds back the others because workers are busy
// takes them from running jobs of lower priority: from elastic jobs down to their min
// (they continue smaller), else by suspending jobs that cannot shrink.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_SCHEDULER_H_
#define LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockstep {

// What a queued job needs.
struct JobDemand {
  std::string id;
  int workers = 1;  // the most it runs on
  std::string device = "cpu";
  uint32_t threads = 0;  // CPU threads per worker; 0: any
  std::string owner;
  bool recovering = false;  // it counts among its owner's running jobs already
  int min_workers = 0;      // the fewest it runs on (an elastic job); 0: `workers`
  int priority = 0;         // JobSpec.priority: higher first
};

// How many more of an owner's jobs may start (their running-jobs limit less the jobs of
// theirs that run), and what their other jobs wait for when none may.
struct OwnerSlots {
  int free = 0;
  std::string why;
};

// A registered worker as the scheduler sees it.
struct WorkerView {
  std::string id;
  std::string device;  // "cpu" or "cuda:K"
  uint32_t threads = 0;
  bool free = true;
};

struct Placement {
  std::string job_id;
  std::vector<std::string> worker_ids;  // rank order
};

struct Schedule {
  std::vector<Placement> start;                    // in queue order
  std::map<std::string, std::string> waiting_for;  // every other queued job: what it waits for
  // The first job that the registered workers could run but the free ones cannot (it
  // holds back the jobs behind it): the one preemption is for. Empty: none.
  std::string blocked;
};

// `queue` in arrival order (recovering jobs first); taken by priority, highest first, a
// stable order (arrival within a priority, recovering jobs before queued ones of theirs);
// `workers` in registration order (placements take the earliest suitable free workers);
// `owners`: the limited owners (others have no limit).
Schedule PlanSchedule(const std::vector<JobDemand>& queue, const std::vector<WorkerView>& workers,
                      std::map<std::string, OwnerSlots> owners = {});

// Whether `worker` suits `job` (device and threads), free or not.
bool Suits(const WorkerView& worker, const JobDemand& job);

// A running job as preemption sees it.
struct RunningJob {
  std::string id;
  int priority = 0;
  // An elastic job's fewest workers (it can give up the others); 0: it cannot shrink,
  // only be suspended (all its workers freed).
  int min_workers = 0;
  bool suspendable = true;  // whether it may be suspended (e.g. it is not stopping already)
  std::vector<std::string> worker_ids;  // rank order
};

// What to take from running jobs so that one waiting job can start.
struct Preemption {
  std::string job_id;  // the job the workers are for
  // Elastic jobs to shrink: each with its workers to release (its last ranks first).
  std::vector<std::pair<std::string, std::vector<std::string>>> shrink;
  std::vector<std::string> suspend;  // jobs to suspend (all their workers freed)
};

// The workers `job` (waiting for free workers) lacks, taken from `running` jobs of lower
// priority only: elastic ones give workers down to their min, the lowest priority first
// and, within one priority, the one with the most to give first (fewest jobs disturbed),
// each only what is still needed. Where that cannot free enough, jobs that cannot shrink
// are suspended instead (lowest priority first, then the most workers), and elastic ones
// shrink only for what the suspensions leave. Only workers that suit `job` count.
// nullopt when `job` does not lack workers or lower-priority jobs cannot free enough.
std::optional<Preemption> PlanPreemption(const JobDemand& job,
                                         const std::vector<RunningJob>& running,
                                         const std::vector<WorkerView>& workers);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_SCHEDULER_H_
