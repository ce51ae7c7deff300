// The worker's CollectiveFactory (job_slot.h): a job's data plane bootstrapped through the
// coordinator's Rendezvous under the job's prefix: NCCL for a CUDA backend, Gloo over TCP
// otherwise.
#ifndef LOCKSTEP_SERVICES_WORKER_COLLECTIVES_H_
#define LOCKSTEP_SERVICES_WORKER_COLLECTIVES_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "services/worker/job_slot.h"

namespace lockstep {

// `host`: the address peers reach this worker at (Gloo binds it).
std::unique_ptr<CollectiveFactory> NewCollectiveFactory(std::shared_ptr<grpc::Channel> coordinator,
                                                        std::string host);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_WORKER_COLLECTIVES_H_
