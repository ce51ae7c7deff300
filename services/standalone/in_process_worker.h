// InProcessWorker: a WorkerClient over a JobSlot in this process, the coordinator's job
// loop without sockets. `lockstep train` runs JobRunner over one of them; tests run
// JobRunner against real replicas with it. Calls run on the caller's thread, except step
// commands, which run in order on a thread each stream owns (as on a worker), so that
// the job loop can keep several in flight.
#ifndef LOCKSTEP_SERVICES_STANDALONE_IN_PROCESS_WORKER_H_
#define LOCKSTEP_SERVICES_STANDALONE_IN_PROCESS_WORKER_H_

#include <map>
#include <memory>
#include <string>

#include "services/coordinator/workers/worker_client.h"
#include "services/worker/job_slot.h"

namespace lockstep {

// Thread-safe; `slot` must outlive the client.
std::unique_ptr<WorkerClient> NewInProcessWorkerClient(JobSlot* slot);

// Connects each address to its slot (an unknown address is a programming error).
class InProcessWorkerFactory final : public WorkerClientFactory {
 public:
  explicit InProcessWorkerFactory(std::map<std::string, JobSlot*> slots)
      : slots_(std::move(slots)) {}
  std::unique_ptr<WorkerClient> Connect(const std::string& address) override;

 private:
  const std::map<std::string, JobSlot*> slots_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_STANDALONE_IN_PROCESS_WORKER_H_
