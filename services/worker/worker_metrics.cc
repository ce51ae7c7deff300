// WorkerMetrics: a worker's Prometheus metrics, called by its JobSlot and Registration (no gRPC, no
// HTTP: tests read the values with ReadMetric). Contract: worker_metrics.h.
#include "services/worker/worker_metrics.h"

#include <chrono>
#include <deque>

namespace lockstep {
namespace {

prometheus::Family<prometheus::Counter>& CounterFamily(prometheus::Registry& r, const char* name,
                                                       const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

// A Collective whose all-reduces are timed and counted into WorkerMetrics.
class MeteredCollective final : public Collective {
 public:
  MeteredCollective(std::unique_ptr<Collective> inner, WorkerMetrics* metrics)
      : inner_(std::move(inner)), metrics_(metrics) {}
  std::string Name() const override { return inner_->Name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  absl::Status AllReduceSum(float* data, size_t n, const CollectiveOptions& options) override {
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status st = inner_->AllReduceSum(data, n, options);
    if (st.ok()) {
      metrics_->OnAllReduce(
          n * sizeof(float),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return st;
  }
  // Started all-reduces are metered when a Wait covers them: from the start to that wait's
  // end. Called by the one thread that drives the collective, like Wait itself.
  absl::StatusOr<CollectiveTicket> StartAllReduceSum(float* data, size_t n,
                                                     const CollectiveOptions& options) override {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<CollectiveTicket> ticket = inner_->StartAllReduceSum(data, n, options);
    if (ticket.ok()) started_.push_back({*ticket, n * sizeof(float), t0});
    return ticket;
  }
  // Reductions by a function (the exact sum's), metered as the float all-reduces: by the
  // bytes of this rank's contributions.
  bool CanAllReduceBy(int total, size_t align) const override {
    return inner_->CanAllReduceBy(total, align);
  }
  absl::Status AllReduceBy(std::span<const float* const> local, size_t n, float* out,
                           const ChunkReduction& r, const CollectiveOptions& options) override {
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status st = inner_->AllReduceBy(local, n, out, r, options);
    if (st.ok()) {
      metrics_->OnAllReduce(
          n * local.size() * sizeof(float),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return st;
  }
  absl::StatusOr<CollectiveTicket> StartAllReduceBy(std::span<const float* const> local, size_t n,
                                                    float* out, const ChunkReduction& r,
                                                    const CollectiveOptions& options) override {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<CollectiveTicket> ticket = inner_->StartAllReduceBy(local, n, out, r, options);
    if (ticket.ok()) started_.push_back({*ticket, n * local.size() * sizeof(float), t0});
    return ticket;
  }
  absl::Status Wait(CollectiveTicket ticket) override {
    absl::Status st = inner_->Wait(ticket);
    const auto now = std::chrono::steady_clock::now();
    while (!started_.empty() && started_.front().ticket <= ticket) {
      const Started& s = started_.front();
      if (st.ok()) {
        metrics_->OnAllReduce(s.bytes, std::chrono::duration<double>(now - s.start).count());
      }
      started_.pop_front();
    }
    return st;
  }
  absl::Status AllReduceInt64(int64_t* data, size_t n, ReduceOp op,
                              const CollectiveOptions& options) override {
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status st = inner_->AllReduceInt64(data, n, op, options);
    if (st.ok()) {
      metrics_->OnAllReduce(
          n * sizeof(int64_t),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return st;
  }
  void Abort(const absl::Status& why) override { inner_->Abort(why); }

 private:
  struct Started {
    CollectiveTicket ticket;
    size_t bytes;
    std::chrono::steady_clock::time_point start;
  };
  const std::unique_ptr<Collective> inner_;
  WorkerMetrics* const metrics_;
  std::deque<Started> started_;  // not yet covered by a Wait
};

}  // namespace

WorkerMetrics::WorkerMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)),
      steps_(CounterFamily(*registry_, "lockstep_worker_steps_total",
                           "Training steps this worker computed")
                 .Add({})),
      allreduce_bytes_(CounterFamily(*registry_, "lockstep_worker_allreduce_bytes_total",
                                     "Bytes this worker all-reduced (its buffer's size per call)")
                           .Add({})),
      heartbeats_(CounterFamily(*registry_, "lockstep_worker_heartbeats_total",
                                "Heartbeats sent to the coordinator, by result")),
      heartbeats_ok_(heartbeats_.Add({{"result", "ok"}})),
      heartbeats_error_(heartbeats_.Add({{"result", "error"}})),
      registrations_(CounterFamily(*registry_, "lockstep_worker_registrations_total",
                                   "Registrations with the coordinator (again after it forgot "
                                   "this worker, e.g. restarted)")
                         .Add({})),
      phase_seconds_(std::make_shared<HistogramFamily>(
          "lockstep_worker_step_phase_seconds",
          "A training step's time on this worker by phase: compute (forward and backward), "
          "allreduce (gradients), update (optimizer)",
          std::vector<prometheus::Labels>{
              {{"phase", "compute"}}, {{"phase", "allreduce"}}, {{"phase", "update"}}},
          DurationBuckets())),
      allreduce_seconds_(std::make_shared<HistogramFamily>(
          "lockstep_worker_allreduce_seconds", "One all-reduce's time on this worker",
          std::vector<prometheus::Labels>{{}}, DurationBuckets())) {}

std::vector<std::shared_ptr<prometheus::Collectable>> WorkerMetrics::collectables() const {
  return {registry_, phase_seconds_, allreduce_seconds_};
}

void WorkerMetrics::OnStep(const StepResult& r) {
  steps_.Increment();
  phase_seconds_->at(0).Observe(r.compute_ms / 1000);
  phase_seconds_->at(1).Observe(r.allreduce_ms / 1000);
  phase_seconds_->at(2).Observe(r.update_ms / 1000);
}

void WorkerMetrics::OnAllReduce(size_t bytes, double seconds) {
  allreduce_bytes_.Increment(static_cast<double>(bytes));
  allreduce_seconds_->at(0).Observe(seconds);
}

std::unique_ptr<Collective> WorkerMetrics::Metered(std::unique_ptr<Collective> collective) {
  if (collective == nullptr) return nullptr;
  return std::make_unique<MeteredCollective>(std::move(collective), this);
}

}  // namespace lockstep
