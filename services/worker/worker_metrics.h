// WorkerMetrics: a worker's Prometheus metrics, called by its JobSlot and Registration
// (no gRPC, no HTTP: tests read the values with ReadMetric).
//
//   lockstep_worker_steps_total                 steps this worker computed
//   lockstep_worker_step_phase_seconds{phase}   compute / allreduce / update (histogram)
//   lockstep_worker_allreduce_bytes_total       bytes all-reduced (each rank's buffers' sizes)
//   lockstep_worker_allreduce_seconds           one all-reduce's time (histogram; with NCCL
//                                               the time to queue it, outside CUDA graphs;
//                                               a bucket overlapping backward: from its start
//                                               to the end of the wait covering it)
//   lockstep_worker_heartbeats_total{result}    heartbeats sent: ok, error
//   lockstep_worker_registrations_total         registrations with the coordinator
//
// Thread safety: thread-safe; every call touches only atomics.
#ifndef LOCKSTEP_SERVICES_WORKER_WORKER_METRICS_H_
#define LOCKSTEP_SERVICES_WORKER_WORKER_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <memory>
#include <vector>

#include "core/collective.h"
#include "core/commands.h"
#include "services/common/observability/metrics.h"

namespace lockstep {

class WorkerMetrics {
 public:
  // Registers the families in `registry`.
  explicit WorkerMetrics(std::shared_ptr<prometheus::Registry> registry);

  // What a MetricsServer serves: the registry and the histograms.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() const;

  // A step this worker computed.
  void OnStep(const StepResult& r);
  void OnHeartbeat(bool ok) { (ok ? heartbeats_ok_ : heartbeats_error_).Increment(); }
  void OnRegistered() { registrations_.Increment(); }
  // `collective`, its all-reduces counted here (bytes and seconds). This must outlive it.
  std::unique_ptr<Collective> Metered(std::unique_ptr<Collective> collective);
  void OnAllReduce(size_t bytes, double seconds);

 private:
  const std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter& steps_;
  prometheus::Counter& allreduce_bytes_;
  prometheus::Family<prometheus::Counter>& heartbeats_;
  prometheus::Counter& heartbeats_ok_;
  prometheus::Counter& heartbeats_error_;
  prometheus::Counter& registrations_;
  const std::shared_ptr<HistogramFamily> phase_seconds_;  // compute, allreduce, update
  const std::shared_ptr<HistogramFamily> allreduce_seconds_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_WORKER_WORKER_METRICS_H_
