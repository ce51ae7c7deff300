// JobManager's core: a job's life as a state machine. Submit queues it, the scheduler
// thread (SchedulerLoop, ScheduleLocked) starts it on workers, RunJob runs it to its end
// state, Recovering takes it through RECOVERING after a lost worker (the scheduler gives it
// workers again, or ExpireRecoveriesLocked says none came), Cancel ends it; every
// change goes through SetStateLocked and reaches the disk in Persist. The manager's other
// concerns have files of their own: job_manager_restart.cc (Start: the records reloaded),
// job_manager_drain.cc, job_manager_limits.cc (per-user limits at submit and at start),
// job_manager_retention.cc (finished jobs forgotten), job_manager_logs.cc (event logs, log
// lines, watchers, TensorBoard), job_manager_checkpoints.cc (final checkpoints, state files)
// and job_manager_sink.cc (a runner's progress).
#include "services/coordinator/scheduling/job_manager.h"

#include <google/protobuf/util/message_differencer.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/spec/memory.h"
#include "core/spec/spec.h"
#include "core/status_macros.h"
#include "services/common/observability/job_log.h"
#include "services/common/rpc/job_state.h"
#include "services/common/security/auth.h"
#include "services/coordinator/scheduling/job_manager_internal.h"
#include "services/coordinator/storage/checkpoint_folder.h"

namespace lockstep {
namespace job_manager_internal {

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

absl::Status Stopping(absl::string_view detail) {
  return absl::UnavailableError(
      absl::StrCat("the coordinator is stopping", detail,
                   ": the job continues from its latest snapshot once it is back"));
}

}  // namespace job_manager_internal
namespace {

JobDemand DemandOf(const v1::Job& job) {
  return {job.id(),
          static_cast<int>(job.spec().workers()),
          job.spec().device(),
          job.spec().threads(),
          job.owner(),
          job.state() == v1::RECOVERING,
          job.spec().replicas() > 0 ? MinWorkers(job.spec()) : 0,
          job.spec().priority()};
}

}  // namespace

using job_manager_internal::NowMs;
using job_manager_internal::RequestKey;
using job_manager_internal::StateEvent;
using job_manager_internal::Stopping;

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
      ExpireRecoveriesLocked();
      metrics_->SetWorkers(pool_->Views().size());
      ended.swap(ended_);
      const absl::Time now = options_.clock->Now();
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
        if (it->second->requeue) RequeueLocked(*it->second);
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
  saves->push_back({rec.job, ++rec.version,
                    rec.history.empty() ? nullptr : std::make_shared<StepHistory>(rec.history),
                    rec.witness.empty()
                        ? nullptr
                        : std::make_shared<std::vector<v1::SnapshotMark>>(rec.witness)});
  ++rec.pending_saves;
  rec.log->Append(
      StateEvent(state, reason.ok() && !rec.job.checkpoint_pending().empty()
                            ? "final checkpoint pending: " + rec.job.checkpoint_pending()
                            : std::string(reason.message())));
  if (IsTerminal(state)) {
    rec.log->Close();
    if (rec.watchers == 0) rec.log->Compact(rec.history.Events());  // else when the last goes
  }
  if (IsTerminal(state)) {  // closed once the workers' last lines had time to come
    logs_to_close_.emplace_back(
        options_.clock->Now() + 2 * options_.heartbeat_interval + absl::Seconds(1), rec.logs);
  }
  LogJob(reason.ok() ? spdlog::level::info : spdlog::level::warn, {rec.job.id()},
         absl::StrCat(v1::JobState_Name(state), reason.ok() ? "" : ": ", reason.message()));
}

void JobManager::Persist(std::vector<Save> saves) {
  for (Save& s : saves) {
    const absl::Status st = records_.Save(s.job, s.version, s.history.get(), s.witness.get());
    if (!st.ok()) LogJob(spdlog::level::err, {s.job.id()}, "job record: " + st.ToString());
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(s.job.id());
    if (it == jobs_.end()) continue;
    --it->second->pending_saves;
    if (st.ok()) it->second->persisted = std::max(it->second->persisted, s.version);
  }
}

absl::StatusOr<v1::Job> JobManager::Submit(const v1::JobSpec& in, const Principal& by) {
  const std::string& owner = by.name;
  ASSIGN_OR_RETURN(v1::JobSpec spec, Validate(in, options_.limits));
  RETURN_IF_ERROR(CheckModelFitsInstalledDataset(spec));
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
      if (it != by_request_id_.end() && jobs_.count(it->second)) {
        const v1::Job& made = jobs_[it->second]->job;
        if (!google::protobuf::util::MessageDifferencer::Equals(made.spec(), spec)) {
          return absl::AlreadyExistsError(absl::StrCat(
              "request_id ", spec.request_id(), " was used for job ", made.id(),
              " with another spec: a retry must send the same spec (or use a new request id)"));
        }
        return made;
      }
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
    rec->history = StepHistory(options_.history_steps);
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
  if (stopping_ || (queue_.empty() && recovering_.empty())) {
    OfferLocked();
    return;
  }
  // Jobs recovering from lost workers come first: they held workers already.
  std::vector<JobDemand> demands;
  for (const std::string& id : recovering_) demands.push_back(DemandOf(jobs_[id]->job));
  for (const std::string& id : queue_) demands.push_back(DemandOf(jobs_[id]->job));
  const Schedule plan = PlanSchedule(demands, pool_->Views(), OwnerSlotsLocked());
  for (const auto& [id, what] : plan.waiting_for) jobs_[id]->job.set_waiting_for(what);
  if (!plan.blocked.empty()) PreemptLocked(plan.blocked, demands);
  for (const Placement& p : plan.start) {
    absl::StatusOr<std::vector<PoolWorker>> workers = pool_->Assign(p.job_id, p.worker_ids);
    if (!workers.ok()) continue;  // the pool changed meanwhile: the next round retries
    Record& rec = *jobs_[p.job_id];
    for (const PoolWorker& w : *workers) rec.ran_on.insert(w.id);
    if (std::erase(recovering_, p.job_id) > 0) {
      rec.job.clear_waiting_for();
      for (const PoolWorker& w : *workers) rec.job.add_workers(w.id);
      SetStateLocked(rec, v1::RUNNING, absl::OkStatus(), saves);
      rec.runner->GiveWorkers(std::move(workers).value());
      continue;
    }
    std::erase(queue_, p.job_id);
    rec.job.clear_waiting_for();
    for (const PoolWorker& w : *workers) rec.job.add_workers(w.id);
    SetStateLocked(rec, v1::RUNNING, absl::OkStatus(), saves);
    rec.series = metrics_->JobStarted(rec.job.id(), rec.job.spec().global_batch_size());
    rec.sink = std::make_unique<Sink>(this, &rec);
    rec.runner = std::make_unique<JobRunner>(rec.job.id(), rec.job.spec(), *workers, factory_,
                                             options_, rec.sink.get(), rec.sink.get(), rec.resume);
    if (rec.resume) rec.runner->SetReplayedUntil(rec.high_water);
    rec.thread = std::thread([this, r = &rec] { RunJob(r); });
  }
  metrics_->SetQueueLength(queue_.size());
  OfferLocked();
}

void JobManager::OfferLocked() {
  // Jobs waiting for workers come first (first come, first served).
  if (stopping_ || !queue_.empty() || !recovering_.empty()) return;
  std::vector<WorkerView> views;  // read once: the offers below take from it
  for (auto& [id, rec] : jobs_) {
    const v1::JobSpec& spec = rec->job.spec();
    const int most = static_cast<int>(spec.workers()) - rec->job.workers_size();
    if (!rec->runner || rec->job.state() != v1::RUNNING || spec.replicas() == 0 || most <= 0 ||
        rec->cancelled || !rec->suspending.empty() || !rec->offered.empty()) {
      continue;
    }
    if (views.empty()) views = pool_->Views();
    JobDemand demand;
    demand.id = id;
    demand.device = spec.device();
    demand.threads = spec.threads();
    std::vector<std::string> ids;
    for (WorkerView& w : views) {
      if (static_cast<int>(ids.size()) < most && w.free && Suits(w, demand)) {
        ids.push_back(w.id);
        w.free = false;
      }
    }
    if (ids.empty()) continue;
    absl::StatusOr<std::vector<PoolWorker>> got = pool_->Assign(id, ids);
    if (!got.ok()) continue;  // the pool changed meanwhile: the next round offers again
    for (const PoolWorker& w : *got) rec->ran_on.insert(w.id);
    rec->offered = std::move(ids);
    rec->runner->OfferWorkers(*std::move(got));
  }
}

void JobManager::ExpireRecoveriesLocked() {
  const absl::Time now = options_.clock->Now();
  for (auto it = recovering_.begin(); it != recovering_.end();) {
    Record& rec = *jobs_[*it];
    if (now < rec.recover_until || !rec.runner) {
      ++it;
      continue;
    }
    rec.runner->NoWorkers(absl::DeadlineExceededError(
        absl::StrCat("no ", rec.job.spec().workers(), " healthy workers within ",
                     absl::FormatDuration(rec.recover_timeout), " (", rec.job.waiting_for(), ")")));
    it = recovering_.erase(it);
  }
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
    pool_->Release(id);  // offered workers it never took included
    rec->offered.clear();
    std::erase(recovering_, id);  // cancelled or drained while it waited for workers
    rec->job.clear_waiting_for();
    if (!st.ok() && !rec->cancelled && rec->runner->draining()) {
      // Stopped by the coordinator's stop, or suspended: recorded to continue (from the
      // snapshot it took, whose step it shows), never CANCELLED.
      rec->job.clear_workers();
      const bool suspended = !stopping_ && !rec->suspending.empty();
      SetStateLocked(*rec, suspended ? v1::SUSPENDED : v1::RECOVERING, st, &saves);
      rec->requeue = suspended;  // once its thread is joined (SchedulerLoop)
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

void JobManager::Recovering(Record& rec, const std::vector<std::string>& lost,
                            const absl::Status& reason, absl::Duration timeout) {
  std::vector<Save> saves;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& w : lost) pool_->Drop(w);
    pool_->Release(rec.job.id());  // the workers it was offered and had not taken too
    rec.offered.clear();
    rec.job.clear_workers();
    rec.job.set_recoveries(rec.job.recoveries() + 1);
    metrics_->Recovery();
    rec.recover_until = options_.clock->Now() + timeout;
    rec.recover_timeout = timeout;
    SetStateLocked(rec, v1::RECOVERING, reason, &saves);
    recovering_.push_back(rec.job.id());
    kicked_ = true;  // the scheduler gives it workers first
  }
  Persist(std::move(saves));  // on disk while it waits
}

absl::Status JobManager::WorkerLeaving(const std::string& worker_id, const std::string& identity) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::optional<std::string> job, pool_->MarkLeaving(worker_id, identity));
  if (!job.has_value()) return absl::OkStatus();  // told before
  metrics_->SetWorkers(pool_->Views().size());
  if (job->empty()) {
    spdlog::info("worker {} is leaving (SIGTERM)", worker_id);
    return absl::OkStatus();
  }
  LogJob(spdlog::level::info, {*job, worker_id},
         absl::StrCat("worker ", worker_id,
                      " is leaving (SIGTERM): the job goes on without it from its next step"));
  if (auto it = jobs_.find(*job); it != jobs_.end() && it->second->runner) {
    it->second->runner->ReleaseWorkers({worker_id}, "leaving (SIGTERM)");
  }
  return absl::OkStatus();
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
      rec->cancelled = true;
      rec->runner->Abort(absl::CancelledError("cancelled by the user"));
    }
    out = rec->job;
  }
  Persist(std::move(saves));
  return out;
}

}  // namespace lockstep
