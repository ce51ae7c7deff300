// What JobManager keeps of a job for its readers: the log lines of the coordinator and of
// the workers that ran it (WatchLogs), the watchers of its event log and their limits, its
// TensorBoard writer, and its snapshots' checksums (Witness).
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "services/common/rpc/job_state.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_internal.h"

namespace lockstep {
using job_manager_internal::Stopping;

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
  if (--rec.watchers == 0 && IsTerminal(rec.job.state())) rec.log->Compact(rec.history.Events());
}

absl::StatusOr<v1::JobWitness> JobManager::Witness(const std::string& id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Record * rec, FindLocked(id));
  v1::JobWitness out;
  for (const v1::SnapshotMark& m : rec->witness) *out.add_snapshots() = m;
  if (rec->job.state() == v1::SUCCEEDED) {
    out.set_final_checksum(rec->job.param_checksum());
    out.set_final_step(rec->job.step());
  }
  return out;
}

JobManager::Watch::~Watch() { m_->EndWatch(id_); }

}  // namespace lockstep
