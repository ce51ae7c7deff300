// The audit tests' harness (audit_test.cc, replay_audit_test.cc): jobs run by JobRunner on
// real replicas in this process (JobSlots on the CPU, Gloo on loopback), with spare
// workers for recoveries and replay audits, liars made by a test-only gradient fault.
#ifndef LOCKSTEP_SERVICES_STANDALONE_AUDIT_TESTING_H_
#define LOCKSTEP_SERVICES_STANDALONE_AUDIT_TESTING_H_

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/coordinator/jobs/job.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/standalone/testing.h"

namespace lockstep::testing {

// `workers` MLP workers with dropout (the audited shard's key matters), `steps` steps,
// Global batch 48: 2 or 3 shards, or `replicas` logical replicas. No `audit_every`: the
// spec's default.
v1::JobSpec Spec(int workers, int steps, std::optional<uint64_t> audit_every, int replicas = 0);

// Doubles every gradient it is given: a worker lying about its gradients.
absl::Status Double(Backend& backend, float* grads, size_t count);

class Recorder final : public JobSink {
 public:
  void OnRunning(int64_t) override {}
  void OnStep(const v1::StepEvent& e) override { steps.push_back(e); }
  void OnEval(const v1::EvalResult&) override {}
  void OnNote(const std::string& why) override { notes.push_back(why); }
  std::vector<v1::StepEvent> steps;
  std::vector<std::string> notes;
};

// Gives the job its survivors and then spares in place of the lost, in rank order, and
// records whom it was told to quarantine.
class SpareSupply final : public WorkerSupply {
 public:
  SpareSupply(std::vector<PoolWorker> all, int n)
      : current_(all.begin(), all.begin() + n), spares_(all.begin() + n, all.end()) {}
  void Recovering(const std::vector<std::string>& lost, const absl::Status& reason,
                  absl::Duration) override {
    reasons.push_back(std::string(reason.message()));
    std::vector<PoolWorker> next;
    for (const PoolWorker& w : current_) {
      if (std::find(lost.begin(), lost.end(), w.id) == lost.end()) next.push_back(w);
    }
    while (next.size() < current_.size()) {
      if (spares_.empty())
        return runner->NoWorkers(absl::DeadlineExceededError("no spare workers"));
      next.push_back(spares_.front());
      spares_.erase(spares_.begin());
    }
    current_ = next;
    runner->GiveWorkers(std::move(next));
  }
  JobRunner* runner = nullptr;  // whose supply it is
  void Quarantine(const PoolWorker& w, const std::string& why) override {
    quarantined.push_back(w.id);
  }
  // A replay audit's checker: the first spare not lent, not excluded.
  std::optional<PoolWorker> LendWorker(const std::string&, uint32_t,
                                       const std::vector<std::string>& exclude) override {
    for (const PoolWorker& w : spares_) {
      if (lend && !lent_.contains(w.id) &&
          std::find(exclude.begin(), exclude.end(), w.id) == exclude.end()) {
        lent_.insert(w.id);
        return w;
      }
    }
    return std::nullopt;
  }
  void ReturnWorker(const PoolWorker& w) override { lent_.erase(w.id); }
  LocalReplica* local_replica() override { return local; }
  std::vector<std::string> reasons, quarantined;
  bool lend = true;               // false: no spare is free for a replay
  LocalReplica* local = nullptr;  // the coordinator's own replica

 private:
  std::vector<PoolWorker> current_, spares_;
  std::set<std::string> lent_;
};

// Runs `spec` on the first spec.workers() of `workers`, the rest spares.
absl::StatusOr<JobOutcome> RunOn(InProcessWorkers& workers, const v1::JobSpec& spec,
                                 const std::string& id, Recorder* sink,
                                 SpareSupply* supply = nullptr);

// A run through SpareSupply: its outcome, and what the supply and the sink were told.
struct SparedRun {
  absl::StatusOr<JobOutcome> out;
  std::vector<std::string> reasons, quarantined, notes;
  std::vector<v1::StepEvent> steps;
};

// Runs `spec` on the first spec.workers() of `workers`, the rest spares for recoveries and
// replay audits.
// With `local`, the coordinator's own replica replays where no spare is lent (`lend`).
SparedRun RunWithSpares(InProcessWorkers& workers, const v1::JobSpec& spec, const std::string& id,
                        LocalReplica* local = nullptr, bool lend = true);

// The "submit a job with a liar" setup: `spec` on `total` workers (its ranks first, then
// spares) of which worker `liar` doubles every gradient it computes.
SparedRun RunWithLiar(int total, int liar, const v1::JobSpec& spec, const std::string& id);

// `spec` with its audit off on honest workers: the undisturbed run.
absl::StatusOr<JobOutcome> Undisturbed(v1::JobSpec spec, Recorder* sink = nullptr);

// One worker, audited by default, a snapshot every 5 steps.
v1::JobSpec OneWorker(int steps);

// A BatchNorm MLP on 4 logical replicas over `workers` workers, a snapshot every 5 steps.
v1::JobSpec BatchNormOnReplicas(int steps, int workers = 2);

}  // namespace lockstep::testing

#endif  // LOCKSTEP_SERVICES_STANDALONE_AUDIT_TESTING_H_
