// In-process workers for tests of the job loop without processes: N JobSlots on the CPU
// (one thread each), their collectives over Gloo on loopback rendezvousing in memory,
// and a WorkerClientFactory that reaches them.
#ifndef LOCKSTEP_SERVICES_STANDALONE_TESTING_H_
#define LOCKSTEP_SERVICES_STANDALONE_TESTING_H_

#include <memory>
#include <string>
#include <vector>

#include "core/store.h"
#include "services/coordinator/worker_pool.h"
#include "services/standalone/in_process_worker.h"
#include "services/worker/job_slot.h"

namespace lockstep::testing {

class InProcessWorkers {
 public:
  // `n` workers with one CPU thread each, at addresses "in-process:R". Their collectives
  // rendezvous in `store` if given (it must outlive them), else in a MemoryStore of their own.
  explicit InProcessWorkers(int n, Store* store = nullptr);
  ~InProcessWorkers();

  WorkerClientFactory* factory() { return factory_.get(); }
  std::vector<PoolWorker> pool_workers() const;
  JobSlot& slot(int r) { return *slots_[r]; }

 private:
  std::unique_ptr<BackendSource> backends_;
  DatasetCache datasets_;
  MemoryStore store_;
  std::unique_ptr<CollectiveFactory> collectives_;
  std::vector<std::unique_ptr<JobSlot>> slots_;
  std::unique_ptr<InProcessWorkerFactory> factory_;
};

}  // namespace lockstep::testing

#endif  // LOCKSTEP_SERVICES_STANDALONE_TESTING_H_
