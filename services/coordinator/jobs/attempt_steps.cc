// Attempt's step loop (attempt.h): each step's commands (a worker's shard and keys, the
// audit's extras), the pipelined loop that sends them and holds the pipeline (Hold) for
// evaluations, snapshots, drains and resizes, and the folding of the workers' answers into
// a step's event.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "services/common/observability/job_log.h"
#include "services/coordinator/jobs/attempt.h"
#include "services/coordinator/jobs/hold.h"
#include "services/coordinator/jobs/logical_dispatch.h"
#include "services/coordinator/jobs/step_deadline.h"

namespace lockstep {
namespace {

constexpr absl::Duration kStreamLifetime = absl::Hours(24 * 30);

}  // namespace

absl::StatusOr<std::vector<StepCommand>> Attempt::StepCommands(
    const StepPlan& p, bool want_checksum, absl::Duration collective_timeout,
    const std::optional<AuditPick>& audit) const {
  const int n = static_cast<int>(workers_.size());
  std::vector<StepCommand> commands(n);
  // The audited shard (the audited rank's; with logical replicas its first replica's) and
  // its key: the checkers recompute it.
  std::span<const int32_t> audited_rows;
  rng::Key audited_key;
  if (job_.logical()) {  // each worker its replicas' rows and keys
    ASSIGN_OR_RETURN(std::vector<WorkerShare> shares, ShareStep(p, n, LogicalWorld(job_.spec())));
    for (int r = 0; r < n; ++r) {
      commands[r] = {p.step, {}, shares[r].rows, want_checksum, collective_timeout};
      commands[r].keys = shares[r].keys;
      commands[r].data_key = p.data_key;
    }
    if (audit.has_value()) {
      const WorkerShare& s = shares[audit->audited];
      audited_rows = s.rows.first(s.rows.size() / s.keys.size());
      audited_key = s.keys[0];
    }
  } else {
    ASSIGN_OR_RETURN(auto shards, ShardBatch(p.indices, n));
    for (int r = 0; r < n; ++r) {
      commands[r] = {p.step, p.keys[r], shards[r], want_checksum, collective_timeout};
      commands[r].data_key = p.data_key;
    }
    if (audit.has_value()) {
      audited_rows = shards[audit->audited];
      audited_key = p.keys[audit->audited];
    }
  }
  if (audit.has_value()) {
    commands[audit->audited].want_grad_digest = true;
    for (int c : audit->checkers) {
      commands[c].audit = true;
      commands[c].audit_indices = audited_rows;
      commands[c].audit_key = audited_key;
    }
  }
  return commands;
}

absl::Status Attempt::CheckAudit(const AuditPick& pick, const std::vector<StepResult>& got,
                                 int64_t step, v1::StepEvent* event) {
  std::vector<std::string> ids;
  for (const PoolWorker& w : workers_) ids.push_back(w.id);
  const AuditVerdict v = JudgeAudit(pick, got, ids);
  JobOutcome& outcome = job_.outcome();
  ++outcome.audits;
  if (v.passed) {
    event->set_audit(absl::StrCat("passed: ", v.detail));
    return absl::OkStatus();
  }
  ++outcome.audits_failed;
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
  // Without recovery the job fails here; the message says so.
  const bool recovers = job_.recovers();
  const std::string who =
      !liars.empty()
          ? absl::StrCat("worker ", absl::StrJoin(liars, ", "), " lied (outvoted by its checkers)",
                         recovers ? " and is quarantined" : "")
          : absl::StrCat("no majority, so workers ", absl::StrJoin(suspects, ", "),
                         recovers ? " are replaced (none quarantined)" : " disagree");
  const std::string then = recovers ? absl::StrCat("the job rolls back to step ", job_.start().step,
                                                   ", its last snapshot (or start)")
                                    : "the job has no recovery";
  const std::string message =
      absl::StrCat("audit of step ", step + 1, " failed: ", who, "; ", then, ": ", v.detail);
  LogJob(spdlog::level::warn, {job_.id()}, message);
  return absl::DataLossError(message);
}

absl::StatusOr<v1::StepEvent> Attempt::Aggregate(const std::vector<StepResult>& got, int64_t step,
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
  if (job_.logical()) {  // over the V replicas in replica order: the same bits on any N
    ASSIGN_OR_RETURN(ReplicaMeans means, MeanOverReplicas(got, LogicalWorld(job_.spec())));
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

std::optional<ResizeAt> Attempt::ReleaseDue(bool* recover) {
  if (!job_.recovers()) return std::nullopt;
  auto [leaving, why] = events_.Releasing(workers_);
  if (leaving.empty()) return std::nullopt;
  ResizeAt resize;
  resize.leaving = std::move(leaving);
  resize.why = std::move(why);
  // Whether the job can go on without them decides whether the boundary snapshots.
  const int n = static_cast<int>(workers_.size());
  *recover = Next({n, 0}, resize, FreeWorkers(resize, n), job_.policy()).kind == Action::kRecover;
  return resize;
}

std::optional<ResizeAt> Attempt::GrowDue() {
  const int most = static_cast<int>(job_.spec().workers()) - static_cast<int>(workers_.size());
  if (!job_.logical() || !job_.recovers() || most <= 0) return std::nullopt;
  std::vector<PoolWorker> joining = events_.TakeOffer();
  if (joining.empty()) return std::nullopt;
  if (static_cast<int>(joining.size()) > most) {  // the rest at a later boundary
    events_.Offer({joining.begin() + most, joining.end()});
    joining.resize(most);
  }
  std::vector<std::string> ids;
  for (const PoolWorker& w : joining) ids.push_back(w.id);
  ResizeAt resize;
  resize.joining = std::move(joining);
  resize.why =
      absl::StrCat("worker", ids.size() > 1 ? "s " : " ", absl::StrJoin(ids, ", "), " joined");
  return resize;
}

absl::StatusOr<AttemptEnd> Attempt::StopToResize(ResizeAt resize, int64_t done, uint64_t checksum) {
  resize.step = done;
  resize.checksum = checksum;
  if (!resize.joining.empty()) {  // the newcomers' state, from rank 0
    ASSIGN_OR_RETURN(TrainState state,
                     clients_[0]->FetchState(job_.id(), *cancel_, job_.options().rpc_timeout));
    if (state.step != done) {
      return WorkerError(0, absl::DataLossError(absl::StrCat("holds step ", state.step,
                                                             " where the job completed ", done)));
    }
    resize.checksum = ParamChecksum(state.params, state.batch_stats);
    resize.held = std::move(state);
  }
  return resize;
}

// One attempt's pipeline of step commands, from the first sent to the last answered.
struct Attempt::Pipeline {
  TrainingPlan& plan;
  const int64_t total, num_test, spe, first;
  std::unique_ptr<StepFanout> fanout;
  const AuditPlan audit;
  std::map<int64_t, AuditPick> audits = {};  // the audited steps in flight
  int64_t sent = first, done = first;
  Hold hold = {};
  std::optional<ResizeAt> resize = {};  // the hold's, with Hold::kResize
  StepDeadline deadline;
  double step_seconds = 0;  // answer to answer, holds excluded
  absl::Time t_last;
};

bool Attempt::ChecksumDue(int64_t done, int64_t total) const {
  const int64_t every = job_.spec().checksum_every_steps();
  return done == total || (every > 0 && done % every == 0);
}

absl::StatusOr<std::optional<AttemptEnd>> Attempt::StepLoop(TrainingPlan& plan, int64_t total,
                                                            int64_t num_test) {
  const v1::JobSpec& spec = job_.spec();
  const CoordinatorOptions& options = job_.options();
  job_.sink()->OnRunning(total);
  ASSIGN_OR_RETURN(std::unique_ptr<StepFanout> fanout,
                   StepFanout::Open(clients_, job_.id(), *cancel_, kStreamLifetime,
                                    [this](int r, const absl::Status& st) {
                                      blamed_ = r;
                                      return WorkerError(r, st);
                                    }));
  // The audit (audit.h): ranks compared only with ranks of equal threads.
  std::vector<uint32_t> threads;
  for (const PoolWorker& w : workers_) {
    threads.push_back(spec.device() == "cuda" ? 0u
                      : spec.threads() > 0    ? spec.threads()
                                              : w.threads);
  }
  const int64_t first = job_.start().step;
  Pipeline p{.plan = plan,
             .total = total,
             .num_test = num_test,
             .spe = plan.steps_per_epoch(),
             .first = first,
             .fanout = std::move(fanout),
             .audit = AuditPlan(spec, std::move(threads),
                                !job_.logical() && job_.setup().model.stats_layout().total() > 0),
             .deadline = StepDeadline(options.step_timeout, options.adaptive_step_deadline),
             .t_last = options.clock->Now()};
  done_ = first;
  if (ReplayAudited())
    replay_ = std::make_unique<ReplayAuditor>(factory_, supply_, options, cancel_.get());
  if (job_.start().kept && first == total && job_.start().checksum != 0) {
    job_.outcome().param_checksum = job_.start().checksum;  // resized after the last step
  }
  if (job_.start().kept && job_.eval_owed() == first) {  // resized where an evaluation failed
    ASSIGN_OR_RETURN(v1::EvalResult eval, Evaluate(num_test, first, (first - 1) / p.spe));
    job_.sink()->OnEval(eval);
  }
  job_.set_eval_owed(-1);
  while (p.done < total) {
    RETURN_IF_ERROR(cancel_->status());
    const bool drain = events_.draining() && p.sent + 1 < total;
    RETURN_IF_ERROR(HoldForBoundary(p, drain));
    if (!drain) RETURN_IF_ERROR(Fill(p));
    const bool checked = ChecksumDue(p.done + 1, total) ||
                         (p.hold.has(Hold::kChecksum) && p.done + 1 == p.hold.step);
    absl::StatusOr<std::vector<StepResult>> taken = p.fanout->Take(p.done, p.deadline.Next());
    if (!taken.ok()) {
      stream_errors_ = p.fanout->Errors();  // for NameTheDead: each rank's own
      // An elastic job resizes from the last step every worker completed: the answers
      // that came before the failure count (attempt_kept.cc).
      if (job_.logical() && job_.recovers()) CountAnswered(*p.fanout, p.done, total, p.spe);
      return taken.status();
    }
    const uint64_t checksum = (*taken)[0].param_checksum;
    RETURN_IF_ERROR(Answer(p, *std::move(taken), checked));
    RETURN_IF_ERROR(SettleReplay(/*wait=*/false));
    if (p.done == p.hold.step) {
      ASSIGN_OR_RETURN(std::optional<AttemptEnd> stop, AtHold(p, checksum));
      if (stop.has_value()) return stop;
    }
    // An elastic job below its most: workers offered now join at the next boundary.
    if (!p.hold.active() && p.done < total && !events_.draining() && (p.resize = GrowDue())) {
      p.hold = {p.sent, Hold::kResize};
      if (p.sent == p.done) return AtHold(p, 0);
    }
  }
  RETURN_IF_ERROR(p.fanout->Close(options.step_timeout));
  JobOutcome& outcome = job_.outcome();
  outcome.train_seconds += p.step_seconds;
  outcome.samples_per_sec =
      p.step_seconds > 0 ? (total - first) * spec.global_batch_size() / p.step_seconds : 0;
  return std::nullopt;
}

absl::Status Attempt::HoldForBoundary(Pipeline& p, bool drain) {
  if (p.hold.active() || p.sent + 1 >= p.total) return absl::OkStatus();
  // Workers released (ReleaseWorkers) leave after one more step, as a drain stops.
  bool recover = false;
  if (!drain && !(p.resize = ReleaseDue(&recover))) return absl::OkStatus();
  // One more step, answered with the replicas' checksum; nothing after it: the snapshot of
  // its state is the drain's, and the start of a recovery without the released. (A job
  // whose last step is out just ends.)
  const StepPlan step = p.plan.Next();
  ASSIGN_OR_RETURN(auto commands, StepCommands(step, true, p.deadline.Next()));
  p.fanout->Send(commands);
  p.hold = {++p.sent, Hold::kChecksum};
  if (EvalDue(job_.spec().eval(), p.sent, p.spe)) p.hold.reasons |= Hold::kEval;
  if (drain || recover) p.hold.reasons |= Hold::kSnapshot;
  p.hold.reasons |= drain ? Hold::kDrain : Hold::kResize;
  return absl::OkStatus();
}

absl::Status Attempt::Fill(Pipeline& p) {
  const Clock& clock = *job_.options().clock;
  while (p.sent < p.total && p.sent - p.done < job_.options().steps_in_flight && !p.hold.active()) {
    const StepPlan step = p.plan.Next();  // the commands' indices point into it until sent
    const int64_t after = p.sent + 1;
    const bool eval = EvalDue(job_.spec().eval(), after, p.spe) && after < p.total;
    const bool snapshot = job_.SnapshotDue(after, p.total, clock.Now());
    // Audited, the job audits each step it snapshots after: the snapshot (taken once the
    // answers are in) holds a state an audit passed, the one a failed audit rolls back to.
    const std::optional<AuditPick> pick = p.audit.Pick(step.step, snapshot);
    if (pick.has_value()) p.audits[step.step] = *pick;
    // The survivors of a stalled peer end their all-reduce when the step is late here.
    ASSIGN_OR_RETURN(auto commands, StepCommands(step, ChecksumDue(after, p.total) || snapshot,
                                                 p.deadline.Next(), pick));
    p.fanout->Send(commands);
    p.sent = after;
    if (eval || snapshot) {
      p.hold = {after,
                (eval ? Hold::kEval : 0u) | (snapshot ? Hold::kSnapshot | Hold::kChecksum : 0u)};
    }
  }
  return absl::OkStatus();
}

absl::Status Attempt::Answer(Pipeline& p, std::vector<StepResult> got, bool checked) {
  ASSIGN_OR_RETURN(v1::StepEvent e, Aggregate(got, p.done, checked));
  if (auto it = p.audits.find(p.done); it != p.audits.end()) {
    RETURN_IF_ERROR(CheckAudit(it->second, got, p.done, &e));
    p.audits.erase(it);
  }
  done_ = ++p.done;
  if (checked) {
    done_checksum_ = got[0].param_checksum;
    done_checksum_step_ = p.done;
  }
  const absl::Time now = job_.options().clock->Now();
  const absl::Duration wall = now - p.t_last;
  p.step_seconds += absl::ToDoubleSeconds(wall);
  p.t_last = now;
  p.deadline.Add(wall);
  JobOutcome& outcome = job_.outcome();
  if (ChecksumDue(p.done, p.total)) outcome.param_checksum = got[0].param_checksum;
  e.set_wall_ms(absl::ToDoubleMilliseconds(wall));
  if (p.step_seconds > 0) {
    e.set_samples_per_sec((p.done - p.first) * job_.spec().global_batch_size() / p.step_seconds);
    e.set_eta_sec((p.total - p.done) * p.step_seconds / (p.done - p.first));
  }
  if (job_.ReportStep(std::move(e), p.done, p.total, p.spe)) ++outcome.replayed_steps;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<AttemptEnd>> Attempt::AtHold(Pipeline& p, uint64_t checksum) {
  const int64_t done = p.done;
  if (p.hold.has(Hold::kEval)) {
    job_.set_eval_owed(done);  // a resize after a failure here evaluates first
    ASSIGN_OR_RETURN(v1::EvalResult eval, Evaluate(p.num_test, done, (done - 1) / p.spe));
    job_.sink()->OnEval(eval);
    job_.set_eval_owed(-1);
  }
  if (p.hold.has(Hold::kSnapshot)) {
    ASSIGN_OR_RETURN(TrainState state,
                     FetchChecked(done, checksum,
                                  absl::StrCat("the state fetched for the snapshot of step ", done,
                                               " does not match the replicas' checksum")));
    // A drain's and a resize's snapshots are kept unaudited (docs/audit.md).
    if (replay_ != nullptr && !p.hold.has(Hold::kDrain) && !p.hold.has(Hold::kResize)) {
      RETURN_IF_ERROR(AuditSnapshot(std::move(state), checksum, p.plan));
    } else {
      job_.KeepSnapshot(std::move(state), checksum, p.plan);
    }
  }
  if (p.hold.has(Hold::kDrain)) {
    return DrainEnd(events_.Drained(absl::StrCat("its snapshot of step ", done)));
  }
  if (p.hold.has(Hold::kResize)) {
    RETURN_IF_ERROR(p.fanout->Close(job_.options().step_timeout));
    return StopToResize(*std::move(p.resize), done, p.hold.has(Hold::kChecksum) ? checksum : 0);
  }
  p.hold = Hold{};
  p.t_last = job_.options().clock->Now();  // neither is step time
  return std::nullopt;
}

}  // namespace lockstep
