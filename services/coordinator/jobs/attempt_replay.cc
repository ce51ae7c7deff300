// Attempt's replay audit (attempt.h, replay_audit.h, docs/audit.md): a periodic snapshot
// of a job the shard audit cannot cover is held back while a lent worker replays the steps
// since the job's last verified state alone, and kept once the params agree bitwise; the
// job's last steps are replayed too before its end is reported. A mismatch rolls the job
// back to its last verified state, as a failed shard audit does.
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "services/common/observability/job_log.h"
#include "services/coordinator/jobs/attempt.h"

namespace lockstep {

bool Attempt::ReplayAudited() const {
  // A job on 2 or more workers has the shard audit (BatchNorm on logical replicas too).
  return supply_ != nullptr && job_.recovers() && job_.spec().audit().every_steps() > 0 &&
         workers_.size() == 1;
}

absl::Status Attempt::AuditSnapshot(TrainState state, uint64_t checksum, const TrainingPlan& plan) {
  RETURN_IF_ERROR(SettleReplay(/*wait=*/true));  // the start is the last verified state now
  const int64_t step = state.step;
  std::map<std::string, std::string> metadata = job_.SnapshotMetadata(checksum, plan, step);
  if (!StartReplay(step, checksum)) {
    job_.KeepSnapshot(std::move(state), checksum, metadata);
    return absl::OkStatus();
  }
  job_.SnapshotTaken(step);
  pending_ = Pending{std::move(state), checksum, std::move(metadata)};
  return absl::OkStatus();
}

absl::Status Attempt::AuditEnd(int64_t total) {
  RETURN_IF_ERROR(SettleReplay(/*wait=*/true));
  if (!StartReplay(total, job_.outcome().param_checksum)) return absl::OkStatus();
  return SettleReplay(/*wait=*/true);
}

bool Attempt::StartReplay(int64_t to, uint64_t checksum) {
  const v1::JobSpec& spec = job_.spec();
  const Start& start = job_.start();
  // The checker computes as the job's workers do: the spec's threads, or theirs (equal).
  uint32_t threads = spec.device() == "cuda" || spec.threads() > 0 ? 0 : workers_[0].threads;
  std::string why;
  for (const PoolWorker& w : workers_) {
    if (threads != 0 && w.threads != threads)
      why = "the job's workers compute with unequal threads";
  }
  if (why.empty() && start.kept) {
    why = "the job continues from a resize's state, which the coordinator does not hold";
  }
  absl::StatusOr<std::shared_ptr<const SharedState>> base;
  if (why.empty() && !(base = job_.StartState()).ok()) why = std::string(base.status().message());
  std::optional<PoolWorker> checker;
  if (why.empty() && !(checker = supply_->LendWorker(spec.device() == "cuda" ? "cuda" : "cpu",
                                                     threads, job_.replay_suspects()))) {
    why = "no free worker of equal threads";
  }
  if (!why.empty()) {
    const std::string note = absl::StrCat("replay audit of step ", to, ": skipped: ", why);
    LogJob(spdlog::level::info, {job_.id()}, note);
    job_.sink()->OnNote(note);
    return false;
  }
  replay_->Start(*std::move(checker),
                 {job_.id(), spec, job_.setup().impl, *std::move(base), start.step, to, checksum});
  return true;
}

absl::Status Attempt::SettleReplay(bool wait) {
  if (replay_ == nullptr || !replay_->busy()) return absl::OkStatus();
  std::optional<ReplayVerdict> v = wait ? replay_->Wait() : replay_->Poll();
  RETURN_IF_ERROR(cancel_->status());  // the job's own end (a cancel, a lost worker) first
  return v.has_value() ? JudgeReplay(*v) : absl::OkStatus();
}

absl::Status Attempt::JudgeReplay(const ReplayVerdict& v) {
  const std::string what = absl::StrCat("replay audit of step ", v.to);
  if (v.status.ok()) ++job_.outcome().audits;
  if (v.status.ok() && v.agreed) {
    job_.sink()->OnNote(absl::StrFormat(
        "%s: passed: worker %s replayed steps %d to %d alone from the state of step %d: params "
        "checksum %016x",
        what, v.checker.id, v.from + 1, v.to, v.from, v.got));
  } else if (!v.status.ok()) {  // not an audit: the snapshot is kept, unaudited
    const std::string note =
        absl::StrCat(what, ": not completed by worker ", v.checker.id, " (", v.status.message(),
                     ")", pending_.has_value() ? "; its snapshot is kept unaudited" : "");
    LogJob(spdlog::level::warn, {job_.id()}, note);
    job_.sink()->OnNote(note);
  }
  if (!v.status.ok() || v.agreed) {
    if (pending_.has_value()) {
      job_.KeepSnapshot(std::move(pending_->state), pending_->checksum, pending_->metadata);
      pending_.reset();
    }
    return absl::OkStatus();
  }
  ++job_.outcome().audits_failed;
  pending_.reset();
  // Two parties: nobody can tell which lied. The job's workers are replaced, the checker
  // is lent to this job no more; none is quarantined.
  audit_lost_ = workers_;
  audit_liars_.clear();
  std::vector<std::string> ids;
  for (const PoolWorker& w : workers_) {
    ids.push_back(w.id);
    job_.replay_suspects().push_back(w.id);
  }
  job_.replay_suspects().push_back(v.checker.id);
  const std::string message = absl::StrCat(
      absl::StrFormat("%s failed: worker %s replayed steps %d to %d from the state of step %d "
                      "alone and got params checksum %016x where the job has %016x",
                      what, v.checker.id, v.from + 1, v.to, v.from, v.got, v.checksum),
      "; nobody can tell which lied, so worker", ids.size() > 1 ? "s " : " ",
      absl::StrJoin(ids, ", "), ids.size() > 1 ? " are" : " is", " replaced and ", v.checker.id,
      " checks this job no more (none quarantined); the job rolls back to step ", job_.start().step,
      ", its last verified snapshot (or start)");
  LogJob(spdlog::level::warn, {job_.id()}, message);
  return absl::DataLossError(message);
}

}  // namespace lockstep
