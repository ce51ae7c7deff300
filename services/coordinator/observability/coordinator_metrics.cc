// CoordinatorMetrics: the coordinator's Prometheus metrics, called by the JobManager and its jobs'
// sinks (no gRPC, no HTTP: tests read the values with ReadMetric). Contract: coordinator_metrics.h.
#include "services/coordinator/observability/coordinator_metrics.h"

#include <algorithm>

#include "services/common/rpc/job_state.h"

namespace lockstep {
namespace {

prometheus::Family<prometheus::Gauge>& GaugeFamily(prometheus::Registry& r, const char* name,
                                                   const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

prometheus::Family<prometheus::Counter>& CounterFamily(prometheus::Registry& r, const char* name,
                                                       const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

bool Known(v1::JobState s) { return s != v1::JOB_STATE_UNSPECIFIED && v1::JobState_IsValid(s); }

}  // namespace

JobSeries::JobSeries(CoordinatorMetrics* m, std::string job_id, int64_t samples_per_step)
    : m_(m),
      job_id_(std::move(job_id)),
      samples_per_step_(static_cast<double>(std::max<int64_t>(0, samples_per_step))) {}

void JobSeries::OnStep(const v1::StepEvent& e) {
  if (step_ == nullptr) {
    absl::MutexLock lock(&m_->mu_);
    const prometheus::Labels job = {{"job_id", job_id_}};
    step_ = &m_->job_step_.Add(job);
    total_steps_ = &m_->job_total_steps_.Add(job);
    loss_ = &m_->job_loss_.Add(job);
    samples_per_second_ = &m_->job_samples_per_second_.Add(job);
    samples_ = &m_->job_samples_.Add(job);
  }
  step_->Set(static_cast<double>(e.step()));
  total_steps_->Set(static_cast<double>(e.total_steps()));
  loss_->Set(e.loss());
  samples_per_second_->Set(e.samples_per_sec());
  samples_->Increment(samples_per_step_);
  m_->samples_.Increment(samples_per_step_);
  m_->steps_.Increment();
  if (e.step() <= high_water_) m_->replayed_steps_.Increment();
  high_water_ = std::max(high_water_, e.step());
  m_->step_seconds_->at(0).Observe(e.wall_ms() / 1000);
  m_->phase_seconds_->at(0).Observe(e.compute_ms() / 1000);
  m_->phase_seconds_->at(1).Observe(e.allreduce_ms() / 1000);
  m_->phase_seconds_->at(2).Observe(e.update_ms() / 1000);
}

void JobSeries::OnEval(const v1::EvalResult& r) {
  if (eval_accuracy_ == nullptr) {
    absl::MutexLock lock(&m_->mu_);
    eval_accuracy_ = &m_->job_eval_accuracy_.Add({{"job_id", job_id_}});
    eval_loss_ = &m_->job_eval_loss_.Add({{"job_id", job_id_}});
  }
  eval_accuracy_->Set(r.test_accuracy());
  eval_loss_->Set(r.test_loss());
}

CoordinatorMetrics::CoordinatorMetrics(std::shared_ptr<prometheus::Registry> registry,
                                       int ended_jobs_kept)
    : registry_(std::move(registry)),
      ended_jobs_kept_(ended_jobs_kept),
      queue_length_(
          GaugeFamily(*registry_, "lockstep_job_queue_length", "Jobs waiting to start").Add({})),
      workers_(GaugeFamily(*registry_, "lockstep_workers", "Registered workers").Add({})),
      workers_lost_(CounterFamily(*registry_, "lockstep_workers_lost_total",
                                  "Workers dropped for missed heartbeats")
                        .Add({})),
      recoveries_(CounterFamily(*registry_, "lockstep_recoveries_total",
                                "Recoveries begun: jobs that lost workers, or were running when "
                                "the coordinator restarted")
                      .Add({})),
      resizes_(CounterFamily(*registry_, "lockstep_job_resizes_total",
                             "Times a running elastic job went on with other workers at a step "
                             "boundary (lost, left, joined or preempted)")
                   .Add({})),
      preemptions_(CounterFamily(*registry_, "lockstep_preemptions_total",
                                 "Running jobs a job of higher priority took workers from, by "
                                 "action: shrink (an elastic job released some) or suspend")),
      shrinks_(preemptions_.Add({{"action", "shrink"}})),
      suspensions_(preemptions_.Add({{"action", "suspend"}})),
      steps_(CounterFamily(*registry_, "lockstep_steps_total",
                           "Training steps completed, replayed steps included")
                 .Add({})),
      replayed_steps_(CounterFamily(*registry_, "lockstep_replayed_steps_total",
                                    "Steps run again after a recovery")
                          .Add({})),
      samples_(CounterFamily(*registry_, "lockstep_samples_total",
                             "Training samples processed (global batch per step), replayed "
                             "steps included; rate() of it is the throughput")
                   .Add({})),
      job_step_(GaugeFamily(*registry_, "lockstep_job_step", "Steps the job has completed")),
      job_total_steps_(
          GaugeFamily(*registry_, "lockstep_job_total_steps", "Steps the job will run in all")),
      job_loss_(GaugeFamily(*registry_, "lockstep_job_loss",
                            "The job's training loss at its latest step (mean over workers)")),
      job_samples_(CounterFamily(*registry_, "lockstep_job_samples_total",
                                 "Training samples the job processed (global batch per step), "
                                 "replayed steps included; rate() of it is its throughput")),
      job_samples_per_second_(GaugeFamily(
          *registry_, "lockstep_job_samples_per_second",
          "Deprecated: use rate(lockstep_job_samples_total). The job's mean throughput since "
          "it started (not over the scrape interval)")),
      job_eval_accuracy_(GaugeFamily(*registry_, "lockstep_job_eval_accuracy",
                                     "The job's test accuracy at its latest evaluation (0..1)")),
      job_eval_loss_(GaugeFamily(*registry_, "lockstep_job_eval_loss",
                                 "The job's test loss at its latest evaluation")),
      step_seconds_(std::make_shared<HistogramFamily>(
          "lockstep_step_seconds", "A training step's wall time at the coordinator",
          std::vector<prometheus::Labels>{{}}, DurationBuckets())),
      phase_seconds_(std::make_shared<HistogramFamily>(
          "lockstep_step_phase_seconds",
          "A training step's time by phase, the slowest worker's: compute (forward and "
          "backward), allreduce (gradients), update (optimizer)",
          std::vector<prometheus::Labels>{
              {{"phase", "compute"}}, {{"phase", "allreduce"}}, {{"phase", "update"}}},
          DurationBuckets())) {
  auto& jobs = GaugeFamily(*registry_, "lockstep_jobs", "Jobs the coordinator knows, by state");
  auto& finished =
      CounterFamily(*registry_, "lockstep_jobs_finished_total", "Jobs that ended, by final state");
  for (int s = 0; s < v1::JobState_ARRAYSIZE; ++s) {
    const auto state = static_cast<v1::JobState>(s);
    if (!Known(state)) continue;
    jobs_[s] = &jobs.Add({{"state", v1::JobState_Name(state)}});
    if (IsTerminal(state)) finished_[s] = &finished.Add({{"state", v1::JobState_Name(state)}});
  }
}

CoordinatorMetrics::~CoordinatorMetrics() = default;

std::vector<std::shared_ptr<prometheus::Collectable>> CoordinatorMetrics::collectables() const {
  return {registry_, step_seconds_, phase_seconds_};
}

void CoordinatorMetrics::JobStateChanged(v1::JobState from, v1::JobState to) {
  if (from == to) return;
  if (Known(from)) jobs_[from]->Decrement();
  if (Known(to)) jobs_[to]->Increment();
  if (Known(from) && Known(to) && !IsTerminal(from) && finished_[to] != nullptr) {
    finished_[to]->Increment();
  }
}

JobSeries* CoordinatorMetrics::JobStarted(const std::string& id, int64_t samples_per_step) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<JobSeries>& s = series_[id];
  if (s == nullptr) s.reset(new JobSeries(this, id, samples_per_step));
  std::erase(ended_, id);
  return s.get();
}

void CoordinatorMetrics::JobEnded(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (!series_.count(id)) return;
  std::erase(ended_, id);
  ended_.push_back(id);
  while (static_cast<int>(ended_.size()) > ended_jobs_kept_) {
    RemoveLocked(ended_.front());
    ended_.pop_front();
  }
}

void CoordinatorMetrics::JobForgotten(const std::string& id) {
  absl::MutexLock lock(&mu_);
  std::erase(ended_, id);
  RemoveLocked(id);
}

void CoordinatorMetrics::RemoveLocked(const std::string& id) {
  auto it = series_.find(id);
  if (it == series_.end()) return;
  const JobSeries& s = *it->second;
  if (s.step_ != nullptr) {
    job_step_.Remove(s.step_);
    job_total_steps_.Remove(s.total_steps_);
    job_loss_.Remove(s.loss_);
    job_samples_per_second_.Remove(s.samples_per_second_);
    job_samples_.Remove(s.samples_);
  }
  if (s.eval_accuracy_ != nullptr) {
    job_eval_accuracy_.Remove(s.eval_accuracy_);
    job_eval_loss_.Remove(s.eval_loss_);
  }
  series_.erase(it);
}

}  // namespace lockstep
