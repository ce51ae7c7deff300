// JobRunner's step loop: each step's commands (a worker's shard and keys, the audit's
// extras), the pipelined loop that sends them and holds the pipeline for evaluations,
// snapshots, drains and resizes, and the folding of the workers' answers into a step's
// event (job_runner.h).
#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "services/common/job_log.h"
#include "services/coordinator/job_runner.h"
#include "services/coordinator/logical_dispatch.h"
#include "services/coordinator/step_deadline.h"

namespace lockstep {
namespace {

constexpr absl::Duration kStreamLifetime = absl::Hours(24 * 30);

}  // namespace

absl::StatusOr<std::vector<StepCommand>> JobRunner::StepCommands(
    const StepPlan& p, bool want_checksum, absl::Duration collective_timeout,
    const std::optional<AuditPick>& audit) const {
  if (logical()) {  // each worker its replicas' rows and keys (the spec has no audit)
    ASSIGN_OR_RETURN(std::vector<WorkerShare> shares,
                     ShareStep(p, static_cast<int>(workers_.size()), LogicalWorld(spec_)));
    std::vector<StepCommand> commands(shares.size());
    for (size_t r = 0; r < shares.size(); ++r) {
      commands[r] = {p.step, {}, shares[r].rows, want_checksum, collective_timeout};
      commands[r].keys = shares[r].keys;
      commands[r].data_key = p.data_key;
    }
    return commands;
  }
  ASSIGN_OR_RETURN(auto shards, ShardBatch(p.indices, static_cast<int>(workers_.size())));
  std::vector<StepCommand> commands(shards.size());
  for (size_t r = 0; r < shards.size(); ++r) {
    commands[r] = {p.step, p.keys[r], shards[r], want_checksum, collective_timeout};
    commands[r].data_key = p.data_key;
  }
  if (audit.has_value()) {
    commands[audit->audited].want_grad_digest = true;
    for (int c : audit->checkers) {
      commands[c].audit = true;
      commands[c].audit_indices = shards[audit->audited];
      commands[c].audit_key = p.keys[audit->audited];
    }
  }
  return commands;
}

absl::Status JobRunner::CheckAudit(const AuditPick& pick, const std::vector<StepResult>& got,
                                   int64_t step, JobOutcome* outcome, v1::StepEvent* event) {
  std::vector<std::string> ids;
  for (const PoolWorker& w : workers_) ids.push_back(w.id);
  const AuditVerdict v = JudgeAudit(pick, got, ids);
  ++outcome->audits;
  if (v.passed) {
    event->set_audit(absl::StrCat("passed: ", v.detail));
    return absl::OkStatus();
  }
  ++outcome->audits_failed;
  audit_lost_.clear();
  audit_liars_.clear();
  std::vector<std::string> liars, suspects;
  for (int r : v.liars) {
    audit_liars_.push_back(workers_[r]);
    audit_lost_.push_back(workers_[r]);
    liars.push_back(workers_[r].id);
  }
  for (int r : v.suspects) {
    audit_lost_.push_back(workers_[r]);
    suspects.push_back(workers_[r].id);
  }
  // Without a supply (no recovery) the job fails here; the message says so.
  const bool recovers = supply_ != nullptr;
  const std::string who =
      !liars.empty()
          ? absl::StrCat("worker ", absl::StrJoin(liars, ", "), " lied (outvoted by its checkers)",
                         recovers ? " and is quarantined" : "")
          : absl::StrCat("no majority, so workers ", absl::StrJoin(suspects, ", "),
                         recovers ? " are replaced (none quarantined)" : " disagree");
  const std::string then =
      recovers
          ? absl::StrCat("the job rolls back to the state at the last audit that passed (step ",
                         start_.step, ")")
          : "the job has no recovery";
  const std::string message =
      absl::StrCat("audit of step ", step + 1, " failed: ", who, "; ", then, ": ", v.detail);
  LogJob(spdlog::level::warn, {job_id_}, message);
  return absl::DataLossError(message);
}

absl::StatusOr<v1::StepEvent> JobRunner::Aggregate(const std::vector<StepResult>& got, int64_t step,
                                                   bool check) const {
  v1::StepEvent e;
  float loss_sum = 0, acc_sum = 0;
  for (size_t r = 0; r < got.size(); ++r) {
    if (check && got[r].param_checksum != got[0].param_checksum) {
      return absl::DataLossError(absl::StrFormat(
          "replicas diverged after step %d: worker %s has params checksum "
          "%016x, worker %s has %016x",
          step + 1, workers_[0].id, got[0].param_checksum, workers_[r].id, got[r].param_checksum));
    }
    loss_sum += got[r].loss;
    acc_sum += got[r].accuracy;
    e.add_local_losses(got[r].loss);
    // The slowest worker's time split.
    e.set_worker_step_ms(std::max(e.worker_step_ms(), got[r].step_ms));
    e.set_compute_ms(std::max(e.compute_ms(), got[r].compute_ms));
    e.set_allreduce_ms(std::max(e.allreduce_ms(), got[r].allreduce_ms));
    e.set_update_ms(std::max(e.update_ms(), got[r].update_ms));
    v1::StepTimes& own = *e.add_worker_times();
    own.set_step_ms(got[r].step_ms);
    own.set_compute_ms(got[r].compute_ms);
    own.set_allreduce_ms(got[r].allreduce_ms);
    own.set_update_ms(got[r].update_ms);
  }
  const float n = static_cast<float>(got.size());
  e.set_loss(loss_sum / n);  // jnp.mean of the local losses
  e.set_accuracy(acc_sum / n);
  if (logical()) {  // over the V replicas in replica order: the same bits on any N
    ASSIGN_OR_RETURN(ReplicaMeans means, MeanOverReplicas(got, LogicalWorld(spec_)));
    e.clear_local_losses();
    for (float l : means.losses) e.add_local_losses(l);
    e.set_loss(means.loss);
    e.set_accuracy(means.accuracy);
  }
  if (!std::isfinite(e.loss())) {  // no replay can help: the job's settings make it diverge
    return absl::FailedPreconditionError(
        absl::StrCat("diverged at step ", step + 1, ": the loss is ", e.loss()));
  }
  return e;
}

absl::Status JobRunner::StepLoop(TrainingPlan& plan, int64_t total, int64_t num_test,
                                 JobOutcome* outcome) {
  const int64_t b = spec_.global_batch_size();
  const int64_t spe = plan.steps_per_epoch();
  const v1::RecoverySpec& recovery = spec_.recovery();
  sink_->OnRunning(total);
  const std::shared_ptr<CancelToken> cancel = attempt();
  ASSIGN_OR_RETURN(std::unique_ptr<StepFanout> fanout,
                   StepFanout::Open(clients_, job_id_, *cancel, kStreamLifetime,
                                    [this](int r, const absl::Status& st) {
                                      blamed_ = r;
                                      return WorkerError(r, st);
                                    }));
  auto checksum_due = [&](int64_t done) {
    return done == total ||
           (spec_.checksum_every_steps() > 0 && done % spec_.checksum_every_steps() == 0);
  };
  // The audit (audit.h): ranks compared only with ranks of equal threads.
  std::vector<uint32_t> threads;
  for (const PoolWorker& w : workers_) {
    threads.push_back(spec_.device() == "cuda" ? 0u
                      : spec_.threads() > 0    ? spec_.threads()
                                               : w.threads);
  }
  const AuditPlan audit(spec_, std::move(threads));
  const bool auditing = spec_.audit().every_steps() > 0;
  std::map<int64_t, AuditPick> audits;  // the audited steps in flight
  // Snapshots only where a recovery can use them. Audited, the job snapshots at each audit
  // (once it passed: the state a failed audit rolls back to) and nowhere else.
  auto snapshot_due = [&](int64_t after) {
    return supply_ != nullptr && after < total && !auditing &&
           (after - last_snapshot_step_ >= static_cast<int64_t>(recovery.snapshot_every_steps()) ||
            absl::Now() - last_snapshot_time_ >= absl::Seconds(recovery.snapshot_every_seconds()));
  };
  const int64_t first = start_.step;
  int64_t sent = first, done = first;
  done_ = first;
  int64_t hold_at = -1;  // the pipeline drains after this step: an evaluation, a snapshot
  bool eval_at_hold = false, snapshot_at_hold = false;
  bool drain_at_hold = false;     // a drain: the run stops after the hold's snapshot
  bool resize_at_hold = false;    // workers join or leave: the run stops for them after the hold
  bool checksum_at_hold = false;  // the hold's step is answered with the replicas' checksums
  double step_seconds = 0;
  auto t_last = std::chrono::steady_clock::now();
  StepDeadline deadline(options_.step_timeout, options_.adaptive_step_deadline);
  if (start_.kept && first == total && start_.checksum != 0) {
    outcome->param_checksum = start_.checksum;  // resized after the last step
  }
  if (start_.kept && eval_owed_ == first) {  // resized where an evaluation failed
    ASSIGN_OR_RETURN(v1::EvalResult eval, Evaluate(num_test, first, (first - 1) / spe));
    sink_->OnEval(eval);
  }
  eval_owed_ = -1;
  while (done < total) {
    RETURN_IF_ERROR(cancel->status());
    const bool drain = draining() && sent + 1 < total;
    // Workers released (ReleaseWorkers) leave after one more step, as a drain stops.
    const bool leave = !drain && hold_at < 0 && sent + 1 < total && ReleaseDue();
    if ((drain || leave) && hold_at < 0) {
      // One more step, answered with the replicas' checksum; nothing after it: the snapshot
      // of its state is the drain's, and the resize's start. (A job whose last step is out
      // just ends.)
      const StepPlan p = plan.Next();
      ASSIGN_OR_RETURN(auto commands, StepCommands(p, true, deadline.Next()));
      fanout->Send(commands);
      hold_at = ++sent;
      eval_at_hold = EvalDue(spec_.eval(), sent, spe);
      snapshot_at_hold = drain || resize_->recover;
      drain_at_hold = drain;
      resize_at_hold = !drain;
      checksum_at_hold = true;
    }
    while (!drain && sent < total && sent - done < options_.steps_in_flight && hold_at < 0) {
      const StepPlan p = plan.Next();  // the commands' indices point into it until sent
      const int64_t after = sent + 1;
      const bool eval = EvalDue(spec_.eval(), after, spe) && after < total;
      const std::optional<AuditPick> pick = audit.Pick(p.step);
      const bool snapshot =
          snapshot_due(after) || (pick.has_value() && supply_ != nullptr && after < total);
      if (pick.has_value()) audits[p.step] = *pick;
      // The survivors of a stalled peer end their all-reduce when the step is late here.
      ASSIGN_OR_RETURN(auto commands,
                       StepCommands(p, checksum_due(after) || snapshot, deadline.Next(), pick));
      fanout->Send(commands);
      sent = after;
      if (eval || snapshot) {
        hold_at = after;
        eval_at_hold = eval;
        snapshot_at_hold = checksum_at_hold = snapshot;
      }
    }
    const bool checked = checksum_due(done + 1) || (checksum_at_hold && done + 1 == hold_at);
    absl::StatusOr<std::vector<StepResult>> taken = fanout->Take(done, deadline.Next());
    if (!taken.ok()) {
      stream_errors_ = fanout->Errors();  // for NameTheDead: each rank's own
      // An elastic job resizes from the last step every worker completed: the answers
      // that came before the failure count (job_resize.cc).
      if (logical() && supply_ != nullptr) {
        done = CountAnswered(*fanout, done, total, spe);
      }
      return taken.status();
    }
    std::vector<StepResult> got = *std::move(taken);
    ASSIGN_OR_RETURN(v1::StepEvent e, Aggregate(got, done, checked));
    if (auto it = audits.find(done); it != audits.end()) {
      RETURN_IF_ERROR(CheckAudit(it->second, got, done, outcome, &e));
      audits.erase(it);
    }
    ++done;
    done_ = done;
    if (checked) {
      done_checksum_ = got[0].param_checksum;
      done_checksum_step_ = done;
    }
    const auto now = std::chrono::steady_clock::now();
    const double wall = std::chrono::duration<double>(now - t_last).count();
    step_seconds += wall;
    t_last = now;
    deadline.Add(absl::Seconds(wall));
    if (done <= high_water_) {
      ++outcome->replayed_steps;
      e.set_replay(true);  // a step run again since the snapshot: `watch` shows it so
    }
    high_water_ = std::max(high_water_, done);
    if (checksum_due(done)) outcome->param_checksum = got[0].param_checksum;
    e.set_wall_ms(wall * 1000);
    e.set_step(done);
    e.set_epoch((done - 1) / spe);
    e.set_samples_per_sec((done - first) * b / step_seconds);
    e.set_eta_sec((total - done) * step_seconds / (done - first));
    e.set_total_steps(total);
    sink_->OnStep(e);
    if (done == hold_at) {
      if (eval_at_hold) {
        eval_owed_ = done;  // a resize after a failure here evaluates first
        ASSIGN_OR_RETURN(v1::EvalResult eval, Evaluate(num_test, done, (done - 1) / spe));
        sink_->OnEval(eval);
        eval_owed_ = -1;
      }
      if (snapshot_at_hold) RETURN_IF_ERROR(TakeSnapshot(done, got[0].param_checksum, plan));
      if (drain_at_hold) return Drained(absl::StrCat("its snapshot of step ", done));
      if (resize_at_hold) {
        RETURN_IF_ERROR(fanout->Close(options_.step_timeout));
        return StopToResize(done, checksum_at_hold ? got[0].param_checksum : 0);
      }
      hold_at = -1;
      t_last = std::chrono::steady_clock::now();  // neither is step time
    }
    // An elastic job below its most: workers free now join at the next boundary.
    if (hold_at < 0 && done < total && !draining() && GrowDue()) {
      hold_at = sent;
      eval_at_hold = snapshot_at_hold = drain_at_hold = checksum_at_hold = false;
      resize_at_hold = true;
      if (sent == done) {
        RETURN_IF_ERROR(fanout->Close(options_.step_timeout));
        return StopToResize(done, 0);
      }
    }
  }
  RETURN_IF_ERROR(fanout->Close(options_.step_timeout));
  outcome->train_seconds += step_seconds;
  outcome->samples_per_sec = step_seconds > 0 ? (total - first) * b / step_seconds : 0;
  return absl::OkStatus();
}

}  // namespace lockstep
