// Scheduling policy: which queued jobs start now, and on which workers. A pure function
// of the queue and the pool's workers, unit-tested on its own; the JobManager applies
// its decisions (WorkerPool::Assign).
//
// First come, first served: a job that the registered workers could run, but the free
// ones cannot yet, holds back the jobs behind it, so that a big job is not starved by
// small ones; a job that needs more workers of its kind than are registered at all is
// passed over (nothing would ever free them) until enough register. A worker suits a job
// when its device matches ("cpu", or "cuda" for any "cuda:K") and, for a CPU job asking
// for `threads`, it has at least that many. An owner at their running-jobs limit
// (OwnerSlots) has their queued jobs passed over: they hold back nobody else's.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_SCHEDULER_H_
#define LOCKSTEP_SERVICES_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <map>
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
};

// `queue` in arrival order; `workers` in registration order (placements take the
// earliest suitable free workers); `owners`: the limited owners (others have no limit).
Schedule PlanSchedule(const std::vector<JobDemand>& queue, const std::vector<WorkerView>& workers,
                      std::map<std::string, OwnerSlots> owners = {});

// Whether `worker` suits `job` (device and threads), free or not.
bool Suits(const WorkerView& worker, const JobDemand& job);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_SCHEDULER_H_
