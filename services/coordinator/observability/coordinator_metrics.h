// CoordinatorMetrics: the coordinator's Prometheus metrics, called by the JobManager and
// its jobs' sinks (no gRPC, no HTTP: tests read the values with ReadMetric).
//
//   lockstep_jobs{state}                 jobs the coordinator knows, by state
//   lockstep_jobs_finished_total{state}  jobs that ended (SUCCEEDED, FAILED, CANCELLED)
//   lockstep_job_queue_length            jobs waiting to start
//   lockstep_workers                     registered workers
//   lockstep_workers_lost_total          workers dropped for missed heartbeats
//   lockstep_recoveries_total            recoveries begun (lost workers, coordinator restarts)
//   lockstep_steps_total                 steps completed, replays included
//   lockstep_replayed_steps_total        steps run again after a recovery
//   lockstep_step_seconds                a step's wall time here (histogram)
//   lockstep_step_phase_seconds{phase}   compute / allreduce / update, the slowest worker's
//   lockstep_samples_total               samples trained on, replays included (rate() of it:
//                                        the cluster's throughput)
//   lockstep_job_step{job_id}, lockstep_job_total_steps{job_id}, lockstep_job_loss{job_id},
//   lockstep_job_samples_total{job_id}, lockstep_job_samples_per_second{job_id} (deprecated:
//   the job's mean throughput since it started, not a rate Prometheus can take),
//   lockstep_job_eval_accuracy{job_id},
//   lockstep_job_eval_loss{job_id}       per job (`job_id`: Prometheus gives `job` to its
//                                        scrape jobs)
//
// A job exports only values it had: its step series appear at its first step and its
// evaluation series at its first evaluation, so a job cancelled before either exports no
// loss or accuracy (not 0).
//
// Bounded labels: per-job series exist from a job's first step; once it ends they are kept for
// the `ended_jobs_kept` most recently ended jobs (so that a scrape after a short job still
// sees its end): an older ended job's series are removed, as are a forgotten job's.
//
// Thread safety: thread-safe. Per-step calls (JobSeries) touch only atomics; the lock
// here is taken when a job starts, ends or is forgotten.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_OBSERVABILITY_COORDINATOR_METRICS_H_
#define LOCKSTEP_SERVICES_COORDINATOR_OBSERVABILITY_COORDINATOR_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <array>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "lockstep/v1/job.pb.h"
#include "services/common/observability/metrics.h"

namespace lockstep {

class CoordinatorMetrics;

// One job's series. Its methods are called on the job's runner thread, one at a time.
class JobSeries {
 public:
  void OnStep(const v1::StepEvent& e);
  void OnEval(const v1::EvalResult& r);

 private:
  friend class CoordinatorMetrics;
  JobSeries(CoordinatorMetrics* m, std::string job_id, int64_t samples_per_step);
  CoordinatorMetrics* m_;
  const std::string job_id_;
  const double samples_per_step_;
  // Null until the job's first step (the first five) or evaluation (the last two): set on
  // the runner thread under m_->mu_, read by CoordinatorMetrics::RemoveLocked under it.
  prometheus::Gauge *step_ = nullptr, *total_steps_ = nullptr, *loss_ = nullptr,
                    *samples_per_second_ = nullptr;
  prometheus::Counter* samples_ = nullptr;
  prometheus::Gauge *eval_accuracy_ = nullptr, *eval_loss_ = nullptr;
  int64_t high_water_ = 0;  // the most steps seen: a step at or below it is a replay
};

class CoordinatorMetrics {
 public:
  static constexpr int kEndedJobsKept = 20;

  // Registers the families in `registry`, which must outlive this.
  explicit CoordinatorMetrics(std::shared_ptr<prometheus::Registry> registry,
                              int ended_jobs_kept = kEndedJobsKept);
  ~CoordinatorMetrics();

  // What a MetricsServer serves: the registry and the histograms.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() const;

  // A job moved from `from` to `to` (JOB_STATE_UNSPECIFIED: it was not known / is
  // forgotten).
  void JobStateChanged(v1::JobState from, v1::JobState to);
  void SetQueueLength(size_t n) { queue_length_.Set(static_cast<double>(n)); }
  void SetWorkers(size_t n) { workers_.Set(static_cast<double>(n)); }
  void WorkersLost(size_t n) { workers_lost_.Increment(static_cast<double>(n)); }
  void Recovery() { recoveries_.Increment(); }
  // A running job went on with other workers at a step boundary (lost, left, joined,
  // preempted: the event says which).
  void Resized() { resizes_.Increment(); }
  // A job of higher priority took a running job's workers: `suspended` (all of them,
  // the job SUSPENDED) or not (an elastic job shrunk).
  void Preempted(bool suspended) { (suspended ? suspensions_ : shrinks_).Increment(); }

  // The series of job `id`, which trains on `samples_per_step` samples a step (its global
  // batch size): a new JobSeries (or the existing one, for a job that resumes), whose
  // series appear with the values they first get. Valid until JobEnded is followed by
  // kept-many other jobs' ends, or JobForgotten.
  JobSeries* JobStarted(const std::string& id, int64_t samples_per_step);
  // The job ended: its series stay among the most recently ended ones.
  void JobEnded(const std::string& id);
  void JobForgotten(const std::string& id);

 private:
  friend class JobSeries;
  void RemoveLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<prometheus::Registry> registry_;
  const int ended_jobs_kept_;
  std::array<prometheus::Gauge*, v1::JobState_ARRAYSIZE> jobs_{};
  std::array<prometheus::Counter*, v1::JobState_ARRAYSIZE> finished_{};
  prometheus::Gauge& queue_length_;
  prometheus::Gauge& workers_;
  prometheus::Counter& workers_lost_;
  prometheus::Counter& recoveries_;
  prometheus::Counter& resizes_;
  prometheus::Family<prometheus::Counter>& preemptions_;
  prometheus::Counter &shrinks_, &suspensions_;  // preemptions_, by what they did
  prometheus::Counter& steps_;
  prometheus::Counter& replayed_steps_;
  prometheus::Counter& samples_;
  prometheus::Family<prometheus::Gauge>& job_step_;
  prometheus::Family<prometheus::Gauge>& job_total_steps_;
  prometheus::Family<prometheus::Gauge>& job_loss_;
  prometheus::Family<prometheus::Counter>& job_samples_;
  prometheus::Family<prometheus::Gauge>& job_samples_per_second_;
  prometheus::Family<prometheus::Gauge>& job_eval_accuracy_;
  prometheus::Family<prometheus::Gauge>& job_eval_loss_;
  const std::shared_ptr<HistogramFamily> step_seconds_;
  const std::shared_ptr<HistogramFamily> phase_seconds_;  // compute, allreduce, update

  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<JobSeries>> series_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> ended_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_OBSERVABILITY_COORDINATOR_METRICS_H_
