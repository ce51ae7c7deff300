#include "services/coordinator/job_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/spec/memory.h"
#include "core/spec/spec.h"
#include "core/status_macros.h"
#include "services/common/auth.h"
#include "services/common/job_log.h"
#include "services/common/job_state.h"
#include "services/coordinator/checkpoint_folder.h"
#include "services/coordinator/user_limits.h"

namespace lockstep {
namespace {

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

std::string RequestKey(const std::string& owner, const std::string& request_id) {
  return absl::StrCat(owner, "\n", request_id);
}

v1::JobEvent StateEvent(v1::JobState state, absl::string_view reason) {
  v1::JobEvent ev;
  ev.mutable_state()->set_state(state);
  ev.mutable_state()->set_reason(std::string(reason));
  ev.set_unix_ms(NowMs());
  return ev;
}

// Why a job stops when the coordinator does: it is to continue, not cancelled.
absl::Status Stopping(absl::string_view detail) {
  return absl::UnavailableError(
      absl::StrCat("the coordinator is stopping", detail,
                   ": the job continues from its latest snapshot once it is back"));
}

JobDemand DemandOf(const v1::Job& job) {
  return {job.id(),
          static_cast<int>(job.spec().workers()),
          job.spec().device(),
          job.spec().threads(),
          job.owner(),
          job.state() == v1::RECOVERING};
}

}  // namespace

struct JobManager::Record {
  v1::Job job;
  int64_t version = 0;    // of `job`, bumped by every change that is written to disk
  int64_t persisted = 0;  // the version on disk
  int pending_saves = 0;  // writes queued and not yet made (it is not forgotten before)
  std::shared_ptr<EventLog> log;
  std::shared_ptr<TensorBoardWriter> tensorboard;  // null: none written
  std::shared_ptr<EventLog> logs;                  // its log lines (WatchLogs)
  std::set<std::string> ran_on;                    // ids of the workers it was given
  int watchers = 0;
  bool resume = false;     // a restarted coordinator's job: it continues from its snapshot
  int64_t high_water = 0;  // with `resume`: the steps it had run (they are replays now)
  bool cancelled = false;  // Cancel was called while it ran
  // RECOVERING: the workers the scheduler gave it, for its runner to take (Replace).
  std::optional<std::vector<PoolWorker>> replacement;
  JobSeries* series = nullptr;  // its metrics, from its start (CoordinatorMetrics)
  std::unique_ptr<Sink> sink;
  std::unique_ptr<JobRunner> runner;  // while the job runs, until its thread is joined
  std::thread thread;
};

// Forwards a runner's progress into the job's summary (under the manager's lock) and its
// event log (outside it), and gives it workers again after a loss (Replace).
class JobManager::Sink final : public JobSink, public WorkerSupply {
 public:
  Sink(JobManager* m, Record* rec)
      : m_(m), rec_(rec), log_(rec->log), tensorboard_(rec->tensorboard), series_(rec->series) {}
  void OnSnapshot(int64_t step) override {
    absl::MutexLock lock(&m_->mu_);
    rec_->job.set_snapshot_step(step);
  }
  void OnRendezvous(const std::string& prefix, const std::vector<PoolWorker>& workers) override {
    if (m_->kv_ == nullptr) return;
    std::set<std::string> members;
    for (const PoolWorker& w : workers) members.insert(w.identity);
    m_->kv_->Open(rec_->job.id(), prefix, std::move(members));
  }
  absl::StatusOr<std::vector<PoolWorker>> Replace(const std::vector<std::string>& lost,
                                                  const absl::Status& reason,
                                                  absl::Duration timeout,
                                                  const CancelToken& cancel) override {
    return m_->Replace(*rec_, lost, reason, timeout, cancel);
  }
  void Quarantine(const PoolWorker& worker, const std::string& why) override {
    m_->pool_->Quarantine(worker.id, why);
    LogJob(spdlog::level::warn, {rec_->job.id(), worker.id},
           absl::StrCat("worker ", worker.id, " quarantined: ", why));
  }
  void OnRunning(int64_t total) override {
    absl::MutexLock lock(&m_->mu_);
    rec_->job.set_total_steps(total);
  }
  void OnStep(const v1::StepEvent& e) override {
    {
      absl::MutexLock lock(&m_->mu_);
      rec_->job.set_step(e.step());
      rec_->job.set_last_loss(e.loss());
      rec_->job.set_samples_per_sec(e.samples_per_sec());
    }
    series_->OnStep(e);
    v1::JobEvent ev;
    *ev.mutable_step() = e;
    ev.set_unix_ms(NowMs());
    if (tensorboard_) tensorboard_->OnStep(e, ev.unix_ms());
    log_->Append(std::move(ev));
  }
  void OnEval(const v1::EvalResult& r) override {
    {
      absl::MutexLock lock(&m_->mu_);
      *rec_->job.mutable_last_eval() = r;
    }
    series_->OnEval(r);
    v1::JobEvent ev;
    *ev.mutable_eval() = r;
    ev.set_unix_ms(NowMs());
    if (tensorboard_) tensorboard_->OnEval(r, ev.unix_ms());
    log_->Append(std::move(ev));
  }

 private:
  JobManager* m_;
  Record* rec_;
  const std::shared_ptr<EventLog> log_;
  const std::shared_ptr<TensorBoardWriter> tensorboard_;
  JobSeries* const series_;
};

JobManager::JobManager(const CoordinatorOptions& options, WorkerPool* pool, KvTable* kv,
                       WorkerClientFactory* factory, CoordinatorMetrics* metrics)
    : options_(options),
      pool_(pool),
      kv_(kv),
      factory_(factory),
      own_metrics_(metrics != nullptr ? nullptr
                                      : std::make_unique<CoordinatorMetrics>(
                                            std::make_shared<prometheus::Registry>())),
      metrics_(metrics != nullptr ? metrics : own_metrics_.get()),
      records_(options.records_dir) {}

JobManager::~JobManager() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [id, rec] : jobs_) {
      if (!rec->runner) continue;
      rec->runner->Drain();  // so that its end is recorded as one to continue
      rec->runner->Abort(Stopping(""));
    }
  }
  if (scheduler_.joinable()) scheduler_.join();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, rec] : jobs_) threads.push_back(std::move(rec->thread));
    for (auto& [id, t] : ended_) threads.push_back(std::move(t));
    ended_.clear();
  }
  for (auto& t : threads) {
    if (t.joinable()) t.join();
  }
}

absl::Status JobManager::Start() {
  ASSIGN_OR_RETURN(std::vector<v1::Job> saved, records_.Load());
  ASSIGN_OR_RETURN(const int64_t next_id, records_.LoadNextId());
  std::vector<Save> saves;
  std::vector<std::string> forgotten;
  int64_t next = 0;
  {
    absl::MutexLock lock(&mu_);
    next_id_ = std::max(next_id_, next_id);
    for (v1::Job& job : saved) {
      auto rec = std::make_unique<Record>();
      const v1::JobState was = job.state();
      rec->job = std::move(job);
      rec->version = rec->persisted = 1;
      rec->log = std::make_shared<EventLog>(options_.history_bytes, &notifier_);
      rec->logs = NewLogs(rec->job.id());
      const std::string id = rec->job.id();
      metrics_->JobStateChanged(v1::JOB_STATE_UNSPECIFIED, was);
      if (id.rfind("job-", 0) == 0)
        next_id_ = std::max<int64_t>(next_id_, std::atoll(id.c_str() + 4) + 1);
      if (!rec->job.spec().request_id().empty())
        by_request_id_[RequestKey(rec->job.owner(), rec->job.spec().request_id())] = id;
      if (IsTerminal(was)) {  // its final event, for watchers; the record stays as it was
        KeepPendingCheckpointLocked(*rec);
        rec->log->Append(StateEvent(was, rec->job.failure_reason()));
        rec->log->Close();
        rec->log->Compact();
        rec->logs->Close();
      } else {
        rec->tensorboard = NewTensorBoardWriter(rec->job);
        // Nothing is lost: a job that was running continues from its latest snapshot, and
        // shows it (RECOVERING at that step) until it has workers.
        if (was != v1::QUEUED) {
          rec->resume = true;
          rec->job.set_recoveries(rec->job.recoveries() + 1);
          metrics_->Recovery();
          rec->job.clear_workers();
          rec->high_water = rec->job.step();
          int64_t from = 0;
          if (!options_.snapshot_dir.empty()) {
            const std::vector<int64_t> steps =
                SnapshotStore(options_.snapshot_dir + "/" + id, 1).Steps();
            if (!steps.empty()) from = steps.back();
          }
          rec->job.set_step(from);
          rec->job.set_snapshot_step(from);
          SetStateLocked(*rec, v1::RECOVERING,
                         absl::UnavailableError(
                             absl::StrCat("the coordinator restarted: the job continues from step ",
                                          from, " once it has workers")),
                         &saves);
        } else {
          SetStateLocked(*rec, v1::QUEUED, absl::OkStatus(), &saves);
        }
        queue_.push_back(id);
      }
      jobs_[id] = std::move(rec);
    }
  }
  Persist(std::move(saves));
  {
    absl::MutexLock lock(&mu_);
    forgotten = ForgetOldLocked();
    next = next_id_;
  }
  Forget(std::move(forgotten), next);
  scheduler_ = std::thread([this] { SchedulerLoop(); });
  return absl::OkStatus();
}

void JobManager::Kick() {
  absl::MutexLock lock(&mu_);
  kicked_ = true;
}

void JobManager::SchedulerLoop() {
  while (true) {
    std::vector<std::pair<std::string, std::thread>> ended;
    std::vector<Save> saves;
    std::vector<std::string> forgotten;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || kicked_; };
      mu_.AwaitWithTimeout(absl::Condition(&wake), absl::Milliseconds(200));
      if (stopping_) return;
      kicked_ = false;
      const std::vector<LostWorker> lost_workers = pool_->TakeLost();
      metrics_->WorkersLost(lost_workers.size());
      for (const LostWorker& lost : lost_workers) {
        auto it = jobs_.find(lost.worker.job_id);
        if (it != jobs_.end() && it->second->runner) {
          it->second->runner->LoseWorker(lost.worker.id, absl::UnavailableError(lost.reason));
        }
      }
      ScheduleLocked(&saves);
      metrics_->SetWorkers(pool_->Views().size());
      ended.swap(ended_);
      const absl::Time now = absl::Now();
      std::erase_if(logs_to_close_, [now](const auto& due) {
        if (due.first > now) return false;
        due.second->Close();
        return true;
      });
    }
    // The threads of jobs that ended: joined, then their runners (and connections) go.
    for (auto& [id, t] : ended) t.join();
    {
      absl::MutexLock lock(&mu_);
      for (auto& [id, t] : ended) {
        auto it = jobs_.find(id);
        if (it == jobs_.end()) continue;
        it->second->runner.reset();
        it->second->sink.reset();
      }
    }
    Persist(std::move(saves));
    int64_t next = 0;
    {
      absl::MutexLock lock(&mu_);
      forgotten = ForgetOldLocked();
      next = next_id_;
    }
    Forget(std::move(forgotten), next);
  }
}

void JobManager::SetStateLocked(Record& rec, v1::JobState state, const absl::Status& reason,
                                std::vector<Save>* saves) {
  metrics_->JobStateChanged(rec.job.state(), state);
  if (IsTerminal(state)) metrics_->JobEnded(rec.job.id());
  rec.job.set_state(state);
  if (!reason.ok()) {
    rec.job.set_failure_reason(std::string(reason.message()));
    rec.job.set_failure_code(absl::StatusCodeToString(reason.code()));
  } else {  // running again after a recovery, or done: no failure to tell
    rec.job.clear_failure_reason();
    rec.job.clear_failure_code();
  }
  if (state == v1::RUNNING) rec.job.set_started_unix_ms(NowMs());
  if (IsTerminal(state)) rec.job.set_finished_unix_ms(NowMs());
  saves->push_back({rec.job, ++rec.version});
  ++rec.pending_saves;
  rec.log->Append(
      StateEvent(state, reason.ok() && !rec.job.checkpoint_pending().empty()
                            ? "final checkpoint pending: " + rec.job.checkpoint_pending()
                            : std::string(reason.message())));
  if (IsTerminal(state)) {
    rec.log->Close();
    if (rec.watchers == 0) rec.log->Compact();  // else when the last watcher goes
  }
  if (IsTerminal(state)) {  // closed once the workers' last lines had time to come
    logs_to_close_.emplace_back(absl::Now() + 2 * options_.heartbeat_interval + absl::Seconds(1),
                                rec.logs);
  }
  LogJob(reason.ok() ? spdlog::level::info : spdlog::level::warn, {rec.job.id()},
         absl::StrCat(v1::JobState_Name(state), reason.ok() ? "" : ": ", reason.message()));
}

void JobManager::Persist(std::vector<Save> saves) {
  for (Save& s : saves) {
    const absl::Status st = records_.Save(s.job, s.version);
    if (!st.ok()) LogJob(spdlog::level::err, {s.job.id()}, "job record: " + st.ToString());
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(s.job.id());
    if (it == jobs_.end()) continue;
    --it->second->pending_saves;
    if (st.ok()) it->second->persisted = std::max(it->second->persisted, s.version);
  }
}

void JobManager::Forget(std::vector<std::string> ids, int64_t next_id) {
  if (ids.empty()) return;
  // The next id first: were the records erased and the coordinator killed before it was
  // on disk, a restart could hand their ids out again.
  if (absl::Status st = records_.SaveNextId(next_id); !st.ok()) {
    spdlog::error("job ids: {}", st.ToString());
    return;  // the records stay: their ids keep the next one above them
  }
  for (const std::string& id : ids) {
    records_.Erase(id).IgnoreError();
    if (!options_.snapshot_dir.empty()) SnapshotStore(options_.snapshot_dir + "/" + id, 1).Clear();
  }
}

absl::StatusOr<v1::Job> JobManager::Submit(const v1::JobSpec& in, const Principal& by) {
  const std::string& owner = by.name;
  ASSIGN_OR_RETURN(v1::JobSpec spec, Validate(in, options_.limits));
  // What resume_from reads, found now (again when the job starts: a job's newest
  // snapshot may be newer then); source.job_id is the job whose state it is.
  ASSIGN_OR_RETURN(const ResumeSource source,
                   CheckpointFolder(options_.checkpoint_dir, options_.snapshot_dir)
                       .ResolveResumeFrom(spec.resume_from()));
  RETURN_IF_ERROR(CheckMemoryBudget(spec, options_.memory));
  absl::MutexLock submit(&submit_mu_);
  v1::Job job;
  std::vector<std::string> forgotten;  // to make room in the records (AdmitLocked)
  int64_t next = 0;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the coordinator is shutting down");
    // Resuming reads another job's state: a user only their own (one text whether or not
    // the job is known), an administrator any.
    if (!by.admin && !source.job_id.empty()) {
      auto it = jobs_.find(source.job_id);
      if (it == jobs_.end() || it->second->job.owner() != owner) {
        return absl::PermissionDeniedError(
            absl::StrCat("resume_from: job ", source.job_id, " is not one of yours"));
      }
    }
    if (!spec.request_id().empty()) {
      auto it = by_request_id_.find(RequestKey(owner, spec.request_id()));
      if (it != by_request_id_.end() && jobs_.count(it->second)) return jobs_[it->second]->job;
    }
    RETURN_IF_ERROR(AdmitLocked(owner, &forgotten));
    // The number orders the jobs; the random part keeps other callers from guessing ids.
    job.set_id(absl::StrFormat("job-%06d-%s", next_id_++, RandomHex(4)));
    job.set_owner(owner);
    *job.mutable_spec() = spec;
    job.set_created_unix_ms(NowMs());
    job.set_state(v1::QUEUED);
    next = next_id_;
  }
  // On disk before anyone can see it: a job acknowledged survives a kill -9.
  if (absl::Status st = records_.Save(job, 1); !st.ok()) {
    Forget(std::move(forgotten), next);  // gone from memory already: from the disk too
    return st;
  }
  std::vector<Save> saves;
  v1::Job out;
  {
    absl::MutexLock lock(&mu_);
    auto rec = std::make_unique<Record>();
    rec->job = job;
    rec->version = rec->persisted = 1;
    rec->log = std::make_shared<EventLog>(options_.history_bytes, &notifier_);
    rec->log->Append(StateEvent(v1::QUEUED, ""));
    metrics_->JobStateChanged(v1::JOB_STATE_UNSPECIFIED, v1::QUEUED);
    rec->tensorboard = NewTensorBoardWriter(job);
    rec->logs = NewLogs(job.id());
    LogJob(spdlog::level::info, {job.id()}, absl::StrCat("QUEUED, submitted by ", owner));
    const MemoryEstimate memory = EstimateMemory(spec);
    LogJob(spdlog::level::info, {job.id()},
           absl::StrCat("estimated memory ", memory.coordinator >> 20, " MiB on the coordinator, ",
                        memory.worker() >> 20, " MiB on each worker"));
    if (!spec.request_id().empty()) by_request_id_[RequestKey(owner, spec.request_id())] = job.id();
    jobs_[job.id()] = std::move(rec);
    queue_.push_back(job.id());
    ScheduleLocked(&saves);
    out = jobs_[job.id()]->job;
    for (std::string& id : ForgetOldLocked()) forgotten.push_back(std::move(id));
    next = next_id_;
  }
  Persist(std::move(saves));
  Forget(std::move(forgotten), next);
  return out;
}

void JobManager::ScheduleLocked(std::vector<Save>* saves) {
  metrics_->SetQueueLength(queue_.size());
  if (stopping_ || (queue_.empty() && recovering_.empty())) return;
  // Jobs recovering from lost workers come first: they held workers already.
  std::vector<JobDemand> demands;
  for (const std::string& id : recovering_) demands.push_back(DemandOf(jobs_[id]->job));
  for (const std::string& id : queue_) demands.push_back(DemandOf(jobs_[id]->job));
  const Schedule plan = PlanSchedule(demands, pool_->Views(), OwnerSlotsLocked());
  for (const auto& [id, what] : plan.waiting_for) jobs_[id]->job.set_waiting_for(what);
  for (const Placement& p : plan.start) {
    absl::StatusOr<std::vector<PoolWorker>> workers = pool_->Assign(p.job_id, p.worker_ids);
    if (!workers.ok()) continue;  // the pool changed meanwhile: the next round retries
    Record& rec = *jobs_[p.job_id];
    for (const PoolWorker& w : *workers) rec.ran_on.insert(w.id);
    if (std::erase(recovering_, p.job_id) > 0) {
      rec.job.clear_waiting_for();
      for (const PoolWorker& w : *workers) rec.job.add_workers(w.id);
      SetStateLocked(rec, v1::RUNNING, absl::OkStatus(), saves);
      rec.replacement = std::move(workers).value();  // Replace hands them to the runner
      continue;
    }
    std::erase(queue_, p.job_id);
    rec.job.clear_waiting_for();
    for (const PoolWorker& w : *workers) rec.job.add_workers(w.id);
    SetStateLocked(rec, v1::RUNNING, absl::OkStatus(), saves);
    rec.series = metrics_->JobStarted(rec.job.id());
    rec.sink = std::make_unique<Sink>(this, &rec);
    rec.runner = std::make_unique<JobRunner>(rec.job.id(), rec.job.spec(), *workers, factory_,
                                             options_, rec.sink.get(), rec.sink.get(), rec.resume);
    if (rec.resume) rec.runner->SetReplayedUntil(rec.high_water);
    rec.thread = std::thread([this, r = &rec] { RunJob(r); });
  }
  metrics_->SetQueueLength(queue_.size());
}

void JobManager::RunJob(Record* rec) {
  JobOutcome out;
  const absl::Status st = rec->runner->Run(&out);
  const std::string id = rec->job.id();  // immutable once created
  if (kv_ != nullptr) kv_->Close(id);
  std::vector<Save> saves;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& w : out.unreachable) pool_->Drop(w);
    pool_->Release(id);
    rec->job.clear_waiting_for();
    if (!st.ok() && !rec->cancelled && rec->runner->draining()) {
      // Stopped by the coordinator's stop: recorded to continue (from the snapshot it took,
      // whose step it shows), never CANCELLED.
      rec->job.clear_workers();
      SetStateLocked(*rec, v1::RECOVERING, st, &saves);
    } else {
      rec->job.set_param_checksum(out.param_checksum);
      rec->job.set_checkpoint_path(out.checkpoint_path);
      rec->job.set_checkpoint_pending(out.checkpoint_pending);  // a full disk: retried
      if (out.pending != nullptr) retrier_.Add(out.pending);
      if (out.samples_per_sec > 0) rec->job.set_samples_per_sec(out.samples_per_sec);
      const v1::JobState state = st.ok()                 ? v1::SUCCEEDED
                                 : absl::IsCancelled(st) ? v1::CANCELLED
                                                         : v1::FAILED;
      SetStateLocked(*rec, state, st, &saves);
    }
    ended_.emplace_back(id, std::move(rec->thread));
    kicked_ = true;  // the scheduler joins this thread and starts what waited
  }
  Persist(std::move(saves));
}

absl::StatusOr<std::vector<PoolWorker>> JobManager::Replace(Record& rec,
                                                            const std::vector<std::string>& lost,
                                                            const absl::Status& reason,
                                                            absl::Duration timeout,
                                                            const CancelToken& cancel) {
  std::vector<Save> saves;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& w : lost) pool_->Drop(w);
    pool_->Release(rec.job.id());
    rec.job.clear_workers();
    rec.job.set_recoveries(rec.job.recoveries() + 1);
    metrics_->Recovery();
    rec.replacement.reset();
    SetStateLocked(rec, v1::RECOVERING, reason, &saves);
    recovering_.push_back(rec.job.id());
    kicked_ = true;  // the scheduler gives it workers first
  }
  Persist(std::move(saves));  // on disk while it waits
  absl::StatusOr<std::vector<PoolWorker>> out;
  {
    absl::MutexLock lock(&mu_);
    const std::string& id = rec.job.id();
    // Whoever cancels the token, stops the manager or cancels the job does it under mu_
    // (Abort, Drain, Cancel) or wakes it within the scheduler's round: the condition is
    // evaluated again when they release it.
    auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return rec.replacement.has_value() || rec.cancelled || stopping_ || cancel.cancelled();
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    const bool got =
        rec.replacement.has_value() && !rec.cancelled && !stopping_ && !cancel.cancelled();
    if (got) {
      out = std::move(*rec.replacement);
      rec.replacement.reset();
    } else {
      std::erase(recovering_, id);
      if (rec.cancelled) {
        out = absl::CancelledError("cancelled by the user");
      } else if (cancel.cancelled()) {
        out = cancel.status();
      } else if (stopping_) {
        out = Stopping(" (drain) while the job waited for workers");
      } else {
        out = absl::DeadlineExceededError(
            absl::StrCat("no ", rec.job.spec().workers(), " healthy workers within ",
                         absl::FormatDuration(timeout), " (", rec.job.waiting_for(), ")"));
      }
    }
  }
  return out;
}

bool JobManager::SettledLocked() const {
  for (const auto& [id, rec] : jobs_) {
    if (rec->thread.joinable() || rec->pending_saves > 0) return false;
  }
  return true;
}

absl::Status JobManager::Drain(absl::Time deadline) {
  const absl::Time start = absl::Now();
  // The runners' share of the grace period; the rest is for the aborted to end and write.
  const absl::Time abort_at = start + std::max(absl::ZeroDuration(), deadline - start) * 3 / 4;
  auto settled = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return SettledLocked(); };
  std::vector<std::string> aborted;
  absl::MutexLock lock(&mu_);
  stopping_ = true;  // no submit, no start, no replacement workers; waits for them end
  int draining = 0;
  for (auto& [id, rec] : jobs_) {
    if (rec->runner && rec->thread.joinable()) {
      rec->runner->Drain();
      ++draining;
    }
  }
  spdlog::info("draining: {} running job(s) snapshot and stop", draining);
  if (!mu_.AwaitWithDeadline(absl::Condition(&settled), abort_at)) {
    for (auto& [id, rec] : jobs_) {
      if (!rec->runner || !rec->thread.joinable()) continue;
      rec->runner->Abort(Stopping(" (drain) and the job reached no step boundary in time"));
      aborted.push_back(id);
    }
    mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);
  }
  // Watchers end now, saying why, rather than when the server's shutdown cuts them off.
  const absl::Status why = Stopping(" (drain); watch again then");
  for (auto& [id, rec] : jobs_) {
    rec->log->Interrupt(why);
    rec->logs->Interrupt(why);
  }
  spdlog::info("drained in {}", absl::FormatDuration(absl::Now() - start));
  if (aborted.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat("no step boundary within the grace period for ",
                                                  absl::StrJoin(aborted, ", "),
                                                  " (they continue from their previous snapshot)"));
}

std::shared_ptr<EventLog> JobManager::NewLogs(const std::string& id) {
  auto logs = std::make_shared<EventLog>(options_.log_bytes, &notifier_);
  absl::MutexLock lock(&logs_mu_);
  logs_[id] = logs;
  return logs;
}

void JobManager::AppendLog(const v1::LogLine& line) {
  std::shared_ptr<EventLog> logs;
  {
    absl::MutexLock lock(&logs_mu_);
    auto it = logs_.find(line.job());
    if (it == logs_.end()) return;
    logs = it->second;
  }
  v1::JobEvent ev;
  *ev.mutable_log() = line;
  if (ev.log().source().empty()) ev.mutable_log()->set_source("coordinator");
  ev.set_unix_ms(line.unix_ms());
  logs->Append(std::move(ev));
}

void JobManager::AppendWorkerLogs(const std::string& worker_id,
                                  const google::protobuf::RepeatedPtrField<v1::LogLine>& lines) {
  std::vector<std::pair<std::shared_ptr<EventLog>, v1::JobEvent>> kept;
  {
    absl::MutexLock lock(&mu_);
    for (const v1::LogLine& line : lines) {
      auto it = jobs_.find(line.job());
      // A worker writes only in the logs of jobs it ran.
      if (it == jobs_.end() || !it->second->ran_on.contains(worker_id)) continue;
      v1::JobEvent ev;
      *ev.mutable_log() = line;
      if (line.source().empty()) ev.mutable_log()->set_source(worker_id);
      ev.mutable_log()->set_worker(worker_id);  // whatever it said
      ev.set_unix_ms(line.unix_ms());
      kept.emplace_back(it->second->logs, std::move(ev));
    }
  }
  for (auto& [logs, ev] : kept) logs->Append(std::move(ev));
}

std::shared_ptr<TensorBoardWriter> JobManager::NewTensorBoardWriter(const v1::Job& job) {
  if (options_.tensorboard_dir.empty()) return nullptr;
  return std::make_shared<TensorBoardWriter>(
      options_.tensorboard_dir, job.id(), job.spec().tensorboard_dir(),
      LearningRateOf(job.spec().optimizer()), &tensorboard_io_);
}

absl::StatusOr<JobManager::Record*> JobManager::FindLocked(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job ", id));
  return it->second.get();
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Record * rec, FindLocked(id));
  return rec->job;
}

void JobManager::KeepPendingCheckpointLocked(Record& rec) {
  const v1::Job& job = rec.job;
  if (job.state() != v1::SUCCEEDED || job.checkpoint_pending().empty()) return;
  const std::string path = CheckpointFolder(options_.checkpoint_dir, options_.snapshot_dir)
                               .CheckpointPath(job.id(), job.spec().checkpoint_path());
  absl::StatusOr<std::unique_ptr<PendingCheckpoint>> pending = PendingCheckpoint::FromSnapshot(
      job.id(), job.spec(), path, job.step(),
      options_.snapshot_dir.empty() ? "" : options_.snapshot_dir + "/" + job.id());
  if (!pending.ok()) {
    LogJob(spdlog::level::err, {job.id()},
           absl::StrCat("final checkpoint pending, and lost with the previous coordinator: ",
                        pending.status().message()));
    return;
  }
  LogJob(spdlog::level::info, {job.id()},
         absl::StrCat("final checkpoint pending (", job.checkpoint_pending(),
                      "): its state of step ", job.step(), " is read back; retried"));
  retrier_.Add(std::move(pending).value());
}

void JobManager::CheckpointWritten(const std::string& id, const std::string& path) {
  std::vector<Save> saves;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;  // forgotten meanwhile
    Record& rec = *it->second;
    rec.job.set_checkpoint_path(std::filesystem::absolute(path).string());
    rec.job.clear_checkpoint_pending();
    saves.push_back({rec.job, ++rec.version});
    ++rec.pending_saves;
  }
  LogJob(spdlog::level::info, {id}, absl::StrCat("final checkpoint written to ", path));
  Persist(std::move(saves));
}

absl::StatusOr<JobManager::StateFile> JobManager::CheckpointFile(const std::string& id,
                                                                 std::optional<int64_t> step) {
  // A pending final checkpoint: written now if the disk takes it, else its snapshot serves.
  retrier_.TryNow(id).IgnoreError();
  ASSIGN_OR_RETURN(const v1::Job job, Get(id));
  std::vector<StateFile> files;  // oldest first
  if (!options_.snapshot_dir.empty()) {
    const SnapshotStore store(options_.snapshot_dir + "/" + id, 1);
    for (int64_t s : store.Steps()) files.push_back({store.PathOf(s), s});
  }
  if (!job.checkpoint_path().empty()) files.push_back({job.checkpoint_path(), job.step()});
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    if (!step.has_value() || it->step == *step) return *it;
  }
  std::vector<int64_t> steps;
  for (const StateFile& f : files) steps.push_back(f.step);
  return absl::NotFoundError(absl::StrCat(
      "job ", id,
      steps.empty() ? " has no snapshot or checkpoint yet"
                    : absl::StrCat(" has its state at steps ", absl::StrJoin(steps, ", "),
                                   step.has_value() ? absl::StrCat(", not ", *step) : "")));
}

v1::ListJobsResponse JobManager::List(const v1::ListJobsRequest& req) {
  absl::MutexLock lock(&mu_);
  v1::ListJobsResponse resp;
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {  // newest first
    const v1::Job& job = it->second->job;
    bool match = req.states().empty();
    for (int s : req.states()) match = match || s == job.state();
    if (!match || (!req.owner().empty() && job.owner() != req.owner())) continue;
    *resp.add_jobs() = job;
    if (req.limit() > 0 && resp.jobs_size() >= req.limit()) break;
  }
  return resp;
}

absl::StatusOr<v1::Job> JobManager::Cancel(const std::string& id) {
  std::vector<Save> saves;
  v1::Job out;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(Record * rec, FindLocked(id));
    if (IsTerminal(rec->job.state())) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, " already ended (", v1::JobState_Name(rec->job.state()), ")"));
    }
    if (std::find(queue_.begin(), queue_.end(), id) != queue_.end()) {
      // Not started (QUEUED, or a restarted coordinator's job RECOVERING without workers).
      std::erase(queue_, id);
      metrics_->SetQueueLength(queue_.size());
      SetStateLocked(*rec, v1::CANCELLED, absl::CancelledError("cancelled by the user"), &saves);
    } else if (rec->runner) {
      rec->cancelled = true;  // ends a wait for workers (Replace)
      rec->runner->Abort(absl::CancelledError("cancelled by the user"));
    }
    out = rec->job;
  }
  Persist(std::move(saves));
  return out;
}

bool JobManager::ForgettableLocked(const Record& rec) const {
  return IsTerminal(rec.job.state()) && rec.persisted == rec.version && rec.pending_saves == 0 &&
         !rec.runner && !rec.thread.joinable();
}

std::string JobManager::ForgetLocked(JobMap::iterator it) {
  const Record& rec = *it->second;
  by_request_id_.erase(RequestKey(rec.job.owner(), rec.job.spec().request_id()));
  {
    absl::MutexLock logs_lock(&logs_mu_);
    logs_.erase(it->first);
  }
  metrics_->JobStateChanged(rec.job.state(), v1::JOB_STATE_UNSPECIFIED);
  metrics_->JobForgotten(it->first);
  std::string id = it->first;
  jobs_.erase(it);
  return id;
}

std::vector<std::string> JobManager::ForgetOldLocked() {
  // Each owner's finished jobs, against that owner's retention only.
  std::map<std::string, int> finished;
  for (const auto& [id, rec] : jobs_) {
    if (IsTerminal(rec->job.state())) ++finished[rec->job.owner()];
  }
  std::vector<std::string> forgotten;
  for (auto it = jobs_.begin(); it != jobs_.end();) {  // oldest first (ids in job order)
    const Record& rec = *it->second;
    if (!IsTerminal(rec.job.state())) {
      ++it;
      continue;
    }
    int& left = finished[rec.job.owner()];
    if (left > options_.user_limits.For(rec.job.owner()).max_jobs_kept && ForgettableLocked(rec)) {
      --left;
      forgotten.push_back(ForgetLocked(it++));
    } else {
      ++it;
    }
  }
  return forgotten;
}

absl::Status JobManager::AdmitLocked(const std::string& owner,
                                     std::vector<std::string>* forgotten) {
  const UserLimits& limits = options_.user_limits.For(owner);
  int queued = 0;
  for (const std::string& id : queue_) queued += jobs_[id]->job.owner() == owner;
  if (limits.max_queued_jobs > 0 && queued >= limits.max_queued_jobs) {
    return absl::ResourceExhaustedError(OverLimit(owner, limits, UserLimit::kQueued, queued));
  }
  if (static_cast<int>(queue_.size()) >= options_.max_queued_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat(queue_.size(), " jobs are queued, the coordinator's limit (--max_queued_jobs ",
                     options_.max_queued_jobs, ")"));
  }
  // At the global cap on records, the submitter's own oldest finished job makes room.
  auto room = jobs_.end();
  if (static_cast<int>(jobs_.size()) >= options_.max_jobs_kept) {
    room = std::find_if(jobs_.begin(), jobs_.end(), [&](const auto& e) {
      return e.second->job.owner() == owner && ForgettableLocked(*e.second);
    });
    if (room == jobs_.end()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the coordinator keeps ", jobs_.size(), " job records (limit --max_jobs_kept ",
          options_.max_jobs_kept, "), none of them a finished job of user ", owner));
    }
  }
  if (limits.submits_per_minute > 0) {
    const absl::Time now = options_.clock->Now();
    auto bucket = submit_rate_.try_emplace(owner, limits.submits_per_minute, now).first;
    absl::Duration wait;
    if (!bucket->second.TryTake(now, &wait)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          OverLimit(owner, limits, UserLimit::kSubmitsPerMinute, limits.submits_per_minute),
          "; the next one in ", absl::FormatDuration(wait)));
    }
  }
  if (room != jobs_.end()) forgotten->push_back(ForgetLocked(room));
  return absl::OkStatus();
}

std::map<std::string, OwnerSlots> JobManager::OwnerSlotsLocked() const {
  std::map<std::string, OwnerSlots> slots;  // the limited owners of queued jobs
  for (const std::string& id : queue_) {
    const std::string& owner = jobs_.at(id)->job.owner();
    if (options_.user_limits.For(owner).max_running_jobs > 0) slots[owner];
  }
  if (slots.empty()) return slots;
  std::map<std::string, int> running;
  for (const auto& [id, rec] : jobs_) {
    const v1::JobState state = rec->job.state();
    if (state == v1::RUNNING || state == v1::RECOVERING) ++running[rec->job.owner()];
  }
  for (auto& [owner, s] : slots) {
    const UserLimits& limits = options_.user_limits.For(owner);
    s.free = limits.max_running_jobs - running[owner];
    s.why = OverLimit(owner, limits, UserLimit::kRunning, running[owner]);
  }
  return slots;
}

absl::StatusOr<std::unique_ptr<JobManager::Watch>> JobManager::StartWatch(const std::string& id,
                                                                          bool logs) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Record * rec, FindLocked(id));
  if (stopping_) return Stopping("; watch again then");
  if (watchers_ >= options_.max_watchers || rec->watchers >= options_.max_watchers_per_job) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many watchers (limits: ", options_.max_watchers_per_job, " per job, ",
                     options_.max_watchers, " in all)"));
  }
  ++watchers_;
  ++rec->watchers;
  return std::unique_ptr<Watch>(new Watch(this, id, logs ? rec->logs : rec->log));
}

void JobManager::EndWatch(const std::string& id) {
  absl::MutexLock lock(&mu_);
  --watchers_;
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  Record& rec = *it->second;
  if (--rec.watchers == 0 && IsTerminal(rec.job.state())) rec.log->Compact();
}

JobManager::Watch::~Watch() { m_->EndWatch(id_); }

}  // namespace lockstep
