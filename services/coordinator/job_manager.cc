#include "services/coordinator/job_manager.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/spec/spec.h"
#include "core/status_macros.h"
#include "services/common/job_state.h"

namespace lockstep {
namespace {

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

v1::JobEvent StateEvent(v1::JobState state, absl::string_view reason) {
  v1::JobEvent ev;
  ev.mutable_state()->set_state(state);
  ev.mutable_state()->set_reason(std::string(reason));
  return ev;
}

absl::Status CheckCheckpointPath(const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  if (path.front() == '/' || path == ".." || path.rfind("../", 0) == 0 ||
      path.find("/../") != std::string::npos ||
      (path.size() >= 3 && path.compare(path.size() - 3, 3, "/..") == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint_path: \"", path,
                     "\" must be relative and without '..' (it is saved "
                     "under the coordinator's checkpoint directory)"));
  }
  return absl::OkStatus();
}

}  // namespace

struct JobManager::Record {
  struct Entry {
    int64_t seq;
    int64_t step;
    v1::JobEvent event;
  };
  v1::Job job;
  std::deque<Entry> history;
  int64_t seq = 0;  // events ever emitted
  int watchers = 0;
  std::unique_ptr<Sink> sink;
  std::unique_ptr<JobRunner> runner;
  std::thread thread;
};

// Forwards a runner's progress into the job's record and event history.
class JobManager::Sink final : public JobSink {
 public:
  Sink(JobManager* m, Record* rec) : m_(m), rec_(rec) {}
  void OnRunning(int64_t total) override {
    absl::MutexLock lock(&m_->mu_);
    rec_->job.set_total_steps(total);
  }
  void OnStep(const v1::StepEvent& e) override {
    absl::MutexLock lock(&m_->mu_);
    rec_->job.set_step(e.step());
    rec_->job.set_last_loss(e.loss());
    rec_->job.set_samples_per_sec(e.samples_per_sec());
    v1::JobEvent ev;
    *ev.mutable_step() = e;
    m_->EmitLocked(*rec_, std::move(ev), e.step());
  }
  void OnEval(const v1::EvalResult& r) override {
    absl::MutexLock lock(&m_->mu_);
    *rec_->job.mutable_last_eval() = r;
    v1::JobEvent ev;
    *ev.mutable_eval() = r;
    m_->EmitLocked(*rec_, std::move(ev), r.step());
  }

 private:
  JobManager* m_;
  Record* rec_;
};

JobManager::JobManager(const CoordinatorOptions& options, WorkerPool* pool, KvTable* kv,
                       WorkerClientFactory* factory)
    : options_(options), pool_(pool), kv_(kv), factory_(factory), records_(options.records_dir) {}

JobManager::~JobManager() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [id, rec] : jobs_) {
      if (rec->runner) rec->runner->Abort(absl::CancelledError("the coordinator is shutting down"));
    }
  }
  if (scheduler_.joinable()) scheduler_.join();
  for (auto& [id, rec] : jobs_) {
    if (rec->thread.joinable()) rec->thread.join();
  }
}

absl::Status JobManager::Start() {
  ASSIGN_OR_RETURN(std::vector<v1::Job> saved, records_.Load());
  {
    absl::MutexLock lock(&mu_);
    for (v1::Job& job : saved) {
      auto rec = std::make_unique<Record>();
      const v1::JobState was = job.state();
      rec->job = std::move(job);
      const std::string& id = rec->job.id();
      if (id.rfind("job-", 0) == 0)
        next_id_ = std::max<int64_t>(next_id_, std::atoll(id.c_str() + 4) + 1);
      if (!rec->job.spec().request_id().empty()) by_request_id_[rec->job.spec().request_id()] = id;
      if (IsTerminal(was)) {  // its final event, for watchers; the record stays as it was
        EmitLocked(*rec, StateEvent(was, rec->job.failure_reason()), rec->job.step());
      } else {
        SetStateLocked(
            *rec, v1::FAILED,
            absl::UnavailableError(absl::StrCat("the coordinator restarted while the job was ",
                                                v1::JobState_Name(was))));
      }
      jobs_[id] = std::move(rec);
    }
    ForgetOldLocked();
  }
  scheduler_ = std::thread([this] { SchedulerLoop(); });
  return absl::OkStatus();
}

void JobManager::SchedulerLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(200));
    for (const LostWorker& lost : pool_->TakeLost(absl::Now())) {
      auto it = jobs_.find(lost.worker.job_id);
      if (it != jobs_.end() && it->second->runner) {
        it->second->runner->Abort(absl::UnavailableError(lost.reason));
      }
    }
    ScheduleLocked();
  }
}

void JobManager::EmitLocked(Record& rec, v1::JobEvent event, int64_t step) {
  event.set_unix_ms(NowMs());
  rec.history.push_back({rec.seq++, step, std::move(event)});
  while (static_cast<int>(rec.history.size()) > options_.max_history) rec.history.pop_front();
}

void JobManager::SetStateLocked(Record& rec, v1::JobState state, const absl::Status& reason) {
  rec.job.set_state(state);
  if (!reason.ok()) {
    rec.job.set_failure_reason(std::string(reason.message()));
    rec.job.set_failure_code(absl::StatusCodeToString(reason.code()));
  }
  if (state == v1::RUNNING) rec.job.set_started_unix_ms(NowMs());
  if (IsTerminal(state)) rec.job.set_finished_unix_ms(NowMs());
  EmitLocked(rec, StateEvent(state, reason.message()), rec.job.step());
  if (absl::Status st = records_.Save(rec.job); !st.ok()) {
    spdlog::error("job record of {}: {}", rec.job.id(), st.ToString());
  }
  spdlog::info("{} {}{}", rec.job.id(), v1::JobState_Name(state),
               reason.ok() ? "" : ": " + std::string(reason.message()));
}

absl::StatusOr<v1::Job> JobManager::Submit(const v1::JobSpec& in) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, Validate(in, options_.limits));
  RETURN_IF_ERROR(CheckCheckpointPath(spec.checkpoint_path()));
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the coordinator is shutting down");
  if (!spec.request_id().empty()) {
    auto it = by_request_id_.find(spec.request_id());
    if (it != by_request_id_.end() && jobs_.count(it->second)) return jobs_[it->second]->job;
  }
  auto rec = std::make_unique<Record>();
  const std::string id = absl::StrFormat("job-%06d", next_id_++);
  rec->job.set_id(id);
  *rec->job.mutable_spec() = spec;
  rec->job.set_created_unix_ms(NowMs());
  SetStateLocked(*rec, v1::QUEUED, absl::OkStatus());
  if (!spec.request_id().empty()) by_request_id_[spec.request_id()] = id;
  jobs_[id] = std::move(rec);
  queue_.push_back(id);
  ScheduleLocked();
  ForgetOldLocked();
  return jobs_[id]->job;
}

void JobManager::ScheduleLocked() {
  // FIFO: a job that does not fit in the free workers holds back the jobs behind it, so
  // big jobs are not starved by small ones; but one that needs more workers of its
  // device than are registered at all is passed over until enough register.
  bool blocked = false;  // by a job ahead that fits the pool once workers are free
  for (auto it = queue_.begin(); it != queue_.end() && !stopping_;) {
    Record& rec = *jobs_[*it];
    const v1::JobSpec& spec = rec.job.spec();
    const int n = static_cast<int>(spec.workers());
    const int registered = pool_->CountFor(spec.device());
    if (registered < n) {
      rec.job.set_waiting_for(
          absl::StrCat(n, " ", spec.device(), " workers (", registered, " registered)"));
      ++it;
      continue;
    }
    if (blocked) {
      rec.job.set_waiting_for("the jobs ahead of it in the queue");
      ++it;
      continue;
    }
    auto workers = pool_->TryAcquire(rec.job.id(), n, spec.device());
    if (!workers) {
      rec.job.set_waiting_for(absl::StrCat(n, " free ", spec.device(), " workers"));
      blocked = true;
      ++it;
      continue;
    }
    rec.job.clear_waiting_for();
    it = queue_.erase(it);
    for (const PoolWorker& w : *workers) rec.job.add_workers(w.id);
    SetStateLocked(rec, v1::RUNNING, absl::OkStatus());
    rec.sink = std::make_unique<Sink>(this, &rec);
    rec.runner = std::make_unique<JobRunner>(rec.job.id(), spec, *workers, factory_, kv_, options_,
                                             rec.sink.get());
    rec.thread = std::thread([this, r = &rec] { RunJob(r); });
  }
}

void JobManager::RunJob(Record* rec) {
  JobOutcome out;
  absl::Status st = rec->runner->Run(&out);
  absl::MutexLock lock(&mu_);
  for (const std::string& id : out.unreachable) pool_->Drop(id);
  pool_->Release(rec->job.id());
  rec->job.set_param_checksum(out.param_checksum);
  rec->job.set_checkpoint_path(out.checkpoint_path);
  if (out.samples_per_sec > 0) rec->job.set_samples_per_sec(out.samples_per_sec);
  if (st.ok()) {
    SetStateLocked(*rec, v1::SUCCEEDED, absl::OkStatus());
  } else if (absl::IsCancelled(st)) {
    SetStateLocked(*rec, v1::CANCELLED, st);
  } else {
    SetStateLocked(*rec, v1::FAILED, st);
  }
  ScheduleLocked();
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
    if (!match) continue;
    *resp.add_jobs() = job;
    if (req.limit() > 0 && resp.jobs_size() >= req.limit()) break;
  }
  return resp;
}

absl::StatusOr<v1::Job> JobManager::Cancel(const std::string& id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Record * rec, FindLocked(id));
  if (IsTerminal(rec->job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " already ended (", v1::JobState_Name(rec->job.state()), ")"));
  }
  if (rec->job.state() == v1::QUEUED) {
    std::erase(queue_, id);
    SetStateLocked(*rec, v1::CANCELLED, absl::CancelledError("cancelled by the user"));
  } else if (rec->runner) {
    rec->runner->Abort(absl::CancelledError("cancelled by the user"));
  }
  return rec->job;
}

void JobManager::ForgetOldLocked() {
  for (auto it = jobs_.begin();
       it != jobs_.end() && static_cast<int>(jobs_.size()) > options_.max_jobs_kept;) {
    Record& rec = *it->second;
    if (IsTerminal(rec.job.state()) && rec.watchers == 0) {
      if (rec.thread.joinable()) rec.thread.join();
      by_request_id_.erase(rec.job.spec().request_id());
      records_.Erase(rec.job.id()).IgnoreError();
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::Status JobManager::Watch(const std::string& id, int64_t from_step,
                               const std::function<bool(const v1::JobEvent&)>& emit,
                               const std::function<bool()>& cancelled) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Record * rec, FindLocked(id));
  if (watchers_ >= options_.max_watchers || rec->watchers >= options_.max_watchers_per_job) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many watchers (limits: ", options_.max_watchers_per_job, " per job, ",
                     options_.max_watchers, " in all)"));
  }
  ++watchers_;
  ++rec->watchers;
  int64_t next = 0;  // next event seq to send
  bool first = true;
  while (true) {
    std::vector<v1::JobEvent> batch;
    const int64_t oldest = rec->history.empty() ? rec->seq : rec->history.front().seq;
    next = std::max(next, oldest);
    for (auto it = rec->history.begin() + (next - oldest); it != rec->history.end(); ++it) {
      if (!first || it->step >= from_step || it->event.has_state()) batch.push_back(it->event);
    }
    first = false;
    next = rec->seq;
    const bool ended = IsTerminal(rec->job.state());
    bool keep = true;
    mu_.Unlock();
    for (const auto& e : batch) {
      if (!(keep = emit(e))) break;
    }
    mu_.Lock();
    if (!keep || ended || cancelled()) break;
    auto more = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return rec->seq > next || IsTerminal(rec->job.state()) || stopping_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&more), absl::Seconds(1));
    if (stopping_) break;
  }
  --watchers_;
  --rec->watchers;
  return absl::OkStatus();
}

}  // namespace lockstep
