// Registration: keeps this worker registered with the coordinator — registers (retrying
// with backoff until the coordinator answers), heartbeats, and registers again when the
// coordinator forgets it (NOT_FOUND, e.g. after a restart). Runs on its own thread.
#ifndef LOCKSTEP_SERVICES_WORKER_REGISTRATION_H_
#define LOCKSTEP_SERVICES_WORKER_REGISTRATION_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "lockstep/v1/registry.grpc.pb.h"
#include "services/worker/worker_metrics.h"

namespace lockstep {

class Registration {
 public:
  // `metrics` (may be null) counts the registrations and heartbeats; it must outlive this.
  Registration(std::shared_ptr<grpc::Channel> coordinator, v1::RegisterRequest request,
               WorkerMetrics* metrics = nullptr);
  ~Registration();  // stops the thread

 private:
  void Loop();

  std::unique_ptr<v1::WorkerRegistry::Stub> stub_;
  const v1::RegisterRequest request_;
  WorkerMetrics* const metrics_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_WORKER_REGISTRATION_H_
