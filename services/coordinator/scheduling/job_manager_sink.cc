// JobManager::Sink: a running job's progress (steps, evals, snapshots, its rendezvous) into
// its summary, metrics, event log and TensorBoard files, on the job's runner thread; and its
// membership reports: a loss (JobManager::Recovering: the scheduler gives it workers
// again), a resize, and a lying worker's quarantine (an audit's verdict), handed to the pool.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/common/observability/job_log.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_internal.h"
#include "services/coordinator/storage/witness.h"

namespace lockstep {
using job_manager_internal::NowMs;
namespace {

// Folds a step's per-worker times into the job's (Job.worker_times, rank order as
// Job.workers): a rank whose worker changed (a recovery, a resize) starts its mean again.
void AddWorkerTimes(const v1::StepEvent& e, v1::Job& job) {
  const int n = std::min(job.workers_size(), e.worker_times_size());
  while (job.worker_times_size() > n) job.mutable_worker_times()->RemoveLast();
  for (int r = 0; r < n; ++r) {
    v1::WorkerStepTimes& w =
        r < job.worker_times_size() ? *job.mutable_worker_times(r) : *job.add_worker_times();
    if (w.worker() != job.workers(r)) {
      w.Clear();
      w.set_worker(job.workers(r));
    }
    const v1::StepTimes& now = e.worker_times(r);
    const double k = static_cast<double>(w.steps() + 1);
    v1::StepTimes& mean = *w.mutable_mean();
    mean.set_step_ms(mean.step_ms() + (now.step_ms() - mean.step_ms()) / k);
    mean.set_compute_ms(mean.compute_ms() + (now.compute_ms() - mean.compute_ms()) / k);
    mean.set_allreduce_ms(mean.allreduce_ms() + (now.allreduce_ms() - mean.allreduce_ms()) / k);
    mean.set_update_ms(mean.update_ms() + (now.update_ms() - mean.update_ms()) / k);
    *w.mutable_last() = now;
    w.set_steps(w.steps() + 1);
  }
}

}  // namespace

void JobManager::Sink::OnSnapshot(int64_t step, uint64_t param_checksum, bool in_memory) {
  std::vector<Save> saves;
  {
    absl::MutexLock lock(&m_->mu_);
    // snapshot_step is only ever what the disk holds: what a restart would resume from.
    if (in_memory) {
      rec_->job.set_memory_snapshot_step(step);
    } else {
      rec_->job.set_snapshot_step(step);
      rec_->job.clear_memory_snapshot_step();
    }
    AddWitnessMark(rec_->witness, step, param_checksum, NowMs(*m_->options_.clock));
    // The steps up to a snapshot are made as durable as its state: a coordinator killed
    // later continues from this snapshot, and a watcher that had not yet seen them (it may
    // lag the job by many steps) is shown them from the record instead of losing them.
    saves.push_back({rec_->job, ++rec_->version, std::make_shared<StepHistory>(rec_->history),
                     std::make_shared<std::vector<v1::SnapshotMark>>(rec_->witness)});
    ++rec_->pending_saves;
  }
  m_->Persist(std::move(saves));
}

void JobManager::Sink::OnRendezvous(const std::string& prefix,
                                    const std::vector<PoolWorker>& workers) {
  if (m_->kv_ == nullptr) return;
  std::set<std::string> members;
  for (const PoolWorker& w : workers) members.insert(w.identity);
  m_->kv_->Open(rec_->job.id(), prefix, std::move(members));
}

void JobManager::Sink::Recovering(const std::vector<std::string>& lost, const absl::Status& reason,
                                  absl::Duration timeout) {
  m_->Recovering(*rec_, lost, reason, timeout);
}

void JobManager::Sink::Quarantine(const PoolWorker& worker, const std::string& why) {
  m_->pool_->Quarantine(worker.id, why);
  LogJob(spdlog::level::warn, {rec_->job.id(), worker.id},
         absl::StrCat("worker ", worker.id, " quarantined: ", why));
}

std::optional<PoolWorker> JobManager::Sink::LendWorker(const std::string& device, uint32_t threads,
                                                       const std::vector<std::string>& exclude) {
  absl::MutexLock lock(&m_->mu_);  // as the scheduler assigns
  // A job waiting for workers (queued, or recovering) comes first: no lending then.
  if (!m_->queue_.empty() || !m_->recovering_.empty()) return std::nullopt;
  for (const WorkerView& w : m_->pool_->Views()) {
    if (!w.free || (threads != 0 && w.threads != threads) ||
        std::find(exclude.begin(), exclude.end(), w.id) != exclude.end()) {
      continue;
    }
    if (device == "cpu" ? w.device != "cpu" : !absl::StartsWith(w.device, "cuda")) continue;
    absl::StatusOr<std::vector<PoolWorker>> got = m_->pool_->Assign(rec_->job.id(), {w.id});
    if (got.ok()) return std::move(got->front());
  }
  return std::nullopt;
}

void JobManager::Sink::ReturnWorker(const PoolWorker& worker) {
  absl::MutexLock lock(&m_->mu_);
  m_->pool_->Free({worker.id});
  m_->kicked_ = true;  // a queued job may take it now
}

void JobManager::Sink::Resized(const std::vector<PoolWorker>& workers,
                               const std::vector<std::string>& lost, const std::string& why,
                               const std::vector<std::string>& released) {
  {
    absl::MutexLock lock(&m_->mu_);
    for (const std::string& w : lost) m_->pool_->Drop(w);
    m_->pool_->Free(released);  // back to the pool (a leaving one is never assigned again)
    m_->metrics_->Resized();
    rec_->job.clear_workers();
    for (const PoolWorker& w : workers) {
      rec_->job.add_workers(w.id);
      std::erase(rec_->offered, w.id);  // taken
    }
    m_->kicked_ = true;  // workers changed: the scheduler looks again
  }
  // An event with its reason (`lockstep watch` shows it); the job stays RUNNING.
  log_->Append(job_manager_internal::StateEvent(v1::RUNNING, why, NowMs(*m_->options_.clock)));
}

void JobManager::Sink::OnNote(const std::string& why) {
  log_->Append(job_manager_internal::StateEvent(v1::RUNNING, why, NowMs(*m_->options_.clock)));
}

void JobManager::Sink::OnRunning(int64_t total) {
  absl::MutexLock lock(&m_->mu_);
  rec_->job.set_total_steps(total);
}

void JobManager::Sink::OnStep(const v1::StepEvent& e) {
  v1::JobEvent ev;
  *ev.mutable_step() = e;
  ev.set_unix_ms(NowMs(*m_->options_.clock));
  {
    absl::MutexLock lock(&m_->mu_);
    rec_->job.set_step(e.step());
    rec_->job.set_high_water_step(std::max(rec_->job.high_water_step(), e.step()));
    rec_->job.set_last_loss(e.loss());
    rec_->job.set_samples_per_sec(e.samples_per_sec());
    AddWorkerTimes(e, rec_->job);
    rec_->history.Add(ev);
  }
  series_->OnStep(e);
  if (tensorboard_) tensorboard_->OnStep(e, ev.unix_ms());
  log_->Append(std::move(ev));
}

void JobManager::Sink::OnEval(const v1::EvalResult& r) {
  {
    absl::MutexLock lock(&m_->mu_);
    *rec_->job.mutable_last_eval() = r;
  }
  series_->OnEval(r);
  v1::JobEvent ev;
  *ev.mutable_eval() = r;
  ev.set_unix_ms(NowMs(*m_->options_.clock));
  if (tensorboard_) tensorboard_->OnEval(r, ev.unix_ms());
  log_->Append(std::move(ev));
}

}  // namespace lockstep
