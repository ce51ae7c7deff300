// Registration: keeps this worker registered with the coordinator — registers (retrying
// with backoff until the coordinator answers), heartbeats, and registers again when the
// coordinator forgets it (NOT_FOUND, e.g. after a restart). Runs on its own thread.
#ifndef LOCKSTEP_SERVICES_WORKER_REGISTRATION_H_
#define LOCKSTEP_SERVICES_WORKER_REGISTRATION_H_

#include <grpcpp/grpcpp.h>

#include <deque>
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

  // Queues a log line about a job for the next heartbeat (the newest kMaxShipped kept).
  // Thread-safe; takes only a leaf lock. Registering sets the log's worker id
  // (SetLogWorkerId).
  void Ship(v1::LogLine line);
  static constexpr size_t kMaxShipped = 1000;

  // This worker is leaving (SIGTERM): a heartbeat saying so (HeartbeatRequest.leaving) goes
  // at once, and every later one says so too; it does not register again. Thread-safe.
  void Leave();
  // Whether a leaving worker may stop waiting for its release: it is not registered, or a
  // heartbeat failed (no coordinator to release it, or one that forgot it). Thread-safe.
  bool gone();

 private:
  void Loop();

  std::unique_ptr<v1::WorkerRegistry::Stub> stub_;
  const v1::RegisterRequest request_;
  WorkerMetrics* const metrics_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool leaving_ ABSL_GUARDED_BY(mu_) = false;
  bool leave_told_ ABSL_GUARDED_BY(mu_) = false;  // a heartbeat with `leaving` went
  bool gone_ ABSL_GUARDED_BY(mu_) = false;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex ship_mu_;  // a leaf: Ship runs wherever a line is logged
  std::deque<v1::LogLine> shipped_ ABSL_GUARDED_BY(ship_mu_);
  std::thread thread_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_WORKER_REGISTRATION_H_
