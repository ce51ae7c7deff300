// JobRunner (job_runner.h): the job's loop. Each attempt's end goes through the decision
// table (jobs/decision.h), and the action it names is carried out here: the workers
// released or kept, the supply told, the next attempt's membership.
#include "services/coordinator/jobs/job_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/spec/spec.h"
#include "core/status_macros.h"
#include "services/common/observability/job_log.h"
#include "services/coordinator/jobs/attempt.h"
#include "services/coordinator/jobs/decision.h"

namespace lockstep {
namespace {

// How long past a recovery's timeout the job waits for its supply's answer (JobManager
// answers within a scheduling round of the timeout) before it gives up by itself.
constexpr absl::Duration kSupplyMargin = absl::Seconds(10);

// The status a Cancelled, Drained or Suspended end gives the job; OK for Finished.
absl::Status StatusOf(const AttemptEnd& end) {
  if (const auto* c = std::get_if<Cancelled>(&end)) return c->why;
  if (const auto* d = std::get_if<Drained>(&end)) return d->why;
  if (const auto* s = std::get_if<Suspended>(&end)) return s->why;
  return absl::OkStatus();
}

}  // namespace

JobRunner::JobRunner(std::string job_id, v1::JobSpec spec, std::vector<PoolWorker> workers,
                     WorkerClientFactory* factory, const CoordinatorOptions& options, JobSink* sink,
                     WorkerSupply* supply, bool resume)
    : job_(std::move(job_id), std::move(spec), options, sink, supply != nullptr, resume),
      factory_(factory),
      supply_(supply) {
  // Connected now, as the scheduler hands the workers over; run by Run.
  events_.NewAttempt(workers);
  attempt_ = std::make_unique<Attempt>(&job_, std::move(workers), factory_, &events_, supply_);
}

JobRunner::~JobRunner() = default;

absl::Status JobRunner::Run(JobOutcome* outcome) {
  absl::Status st = Loop();
  *outcome = job_.outcome();
  // Sticky: an abort that arrived before the job's end wins, whatever came after it.
  if (absl::Status why = events_.job().status(); !why.ok()) return why;
  if (st.ok() || recovered_from_.empty()) return st;
  // A failed recovery's own failure is in `st` already ("...; recovery failed: ...").
  return absl::Status(
      st.code(), absl::StrCat(st.message(), " (after ", recovered_from_.size(),
                              " recoveries from: ", absl::StrJoin(recovered_from_, "; "), ")"));
}

absl::Status JobRunner::Loop() {
  RETURN_IF_ERROR(job_.Begin());
  std::vector<PoolWorker> workers;  // the next attempt's
  for (bool first = true;; first = false) {
    if (!first) {
      // The attempt before is gone now (its connections with it); this one stays until the
      // next, or the runner, goes.
      attempt_.reset();
      attempt_ = std::make_unique<Attempt>(&job_, std::move(workers), factory_, &events_, supply_);
    }
    Attempt& attempt = *attempt_;
    AttemptEnd end = attempt.Run();
    const int n = static_cast<int>(attempt.workers().size());
    const Action action = Next({n, counted_recoveries_}, end, FreeWorkers(end, n), job_.policy());
    if (action.kind == Action::kResize || action.kind == Action::kShrink) {
      workers = action.kind == Action::kResize ? Resize(attempt, std::get<ResizeAt>(std::move(end)))
                                               : Shrink(std::get<Failed>(end));
      events_.NewAttempt(workers);
      continue;
    }
    job_.FallBack();  // a resize that failed: from the snapshot
    std::vector<std::string> lost;
    const absl::Status st = Settle(end, &lost);
    // The survivors at once: a released worker aborts its collective.
    attempt.ReleaseAll(st.ok() ? "job finished" : std::string(st.message()));
    switch (action.kind) {
      case Action::kFinish:
        job_.Succeeded();
        return absl::OkStatus();
      case Action::kRecover: {
        ASSIGN_OR_RETURN(workers, Recover(st, lost, action.counted));
        recovered_from_.push_back(std::string(st.message()));
        events_.NewAttempt(workers);
        continue;
      }
      default:  // kFail, kCancel, kSuspend
        return st;
    }
  }
}

absl::Status JobRunner::Settle(const AttemptEnd& end, std::vector<std::string>* lost) {
  JobOutcome& outcome = job_.outcome();
  if (const auto* failed = std::get_if<Failed>(&end)) {
    outcome.unreachable = failed->lost;
    *lost = failed->lost;
    for (const PoolWorker& w : failed->audit_lost) {
      if (std::find(lost->begin(), lost->end(), w.id) == lost->end()) lost->push_back(w.id);
    }
    // A liar gets no more work whether or not the job goes on.
    for (const PoolWorker& w : failed->liars) {
      outcome.quarantined.push_back(w.id);
      if (supply_ != nullptr) supply_->Quarantine(w, std::string(failed->why.message()));
    }
    return failed->why;
  }
  if (const auto* resize = std::get_if<ResizeAt>(&end)) {
    // Workers released from a job that cannot go on without them: it recovers from the
    // snapshot it just took, on replacements; nobody was lost.
    events_.Released(resize->leaving);
    outcome.unreachable.clear();
    return absl::UnavailableError(absl::StrCat(
        resize->why, ": the job cannot go on without ", resize->leaving.size() > 1 ? "them" : "it",
        job_.logical() ? absl::StrCat(" (fewer than ", MinWorkers(job_.spec()), " workers left)")
                       : std::string(" (not elastic)"),
        "; it continues from its snapshot of step ", resize->step, " on replacements"));
  }
  return StatusOf(end);
}

std::vector<PoolWorker> JobRunner::Resize(Attempt& attempt, ResizeAt resize) {
  const std::vector<PoolWorker>& before = attempt.workers();
  // The workers that stay keep their ranks' order (and their state: the first ranks).
  std::vector<PoolWorker> workers;
  for (const PoolWorker& w : before) {
    if (std::find(resize.leaving.begin(), resize.leaving.end(), w.id) == resize.leaving.end()) {
      workers.push_back(w);
    }
  }
  Start kept;
  kept.step = resize.step;
  kept.checksum = resize.checksum;
  kept.held = std::move(resize.held);
  kept.kept_ranks = static_cast<int>(workers.size());
  job_.KeepState(std::move(kept));
  for (PoolWorker& w : resize.joining) workers.push_back(std::move(w));
  const std::string why =
      absl::StrCat("resized ", before.size(), " -> ", workers.size(), " workers: ", resize.why,
                   "; continuing from step ", resize.step);
  LogJob(spdlog::level::info, {job_.id()}, why);
  // Released now: each drops its replica (its collective aborted), and may leave.
  attempt.Release(resize.leaving, why);
  events_.Released(resize.leaving);
  supply_->Resized(workers, {}, why, resize.leaving);
  ++job_.outcome().resizes;
  return workers;
}

std::vector<PoolWorker> JobRunner::Shrink(const Failed& failed) {
  const Start& start = job_.start();
  if (start.kept && start.held.has_value() && start.step == failed.completed) {
    // A grow that failed (a worker lost while it prepared): the state it fetched is here,
    // checked; every survivor gets it, whether or not its own Prepare kept one.
    job_.SendHeldStateToEveryRank();
  } else {
    Start kept;
    kept.step = failed.completed;
    kept.checksum = failed.checksum;
    kept.kept_ranks = static_cast<int>(failed.survivors.size());
    job_.KeepState(std::move(kept));
  }
  const size_t n = failed.survivors.size() + failed.lost.size();
  const std::string why =
      absl::StrCat("resized ", n, " -> ", failed.survivors.size(), " workers: worker",
                   failed.lost.size() > 1 ? "s " : " ", absl::StrJoin(failed.lost, ", "), " lost (",
                   failed.why.message(), "); continuing from step ", failed.completed);
  LogJob(spdlog::level::warn, {job_.id()}, why);
  supply_->Resized(failed.survivors, failed.lost, why, {});
  job_.outcome().unreachable.clear();  // dropped by Resized
  ++job_.outcome().resizes;
  return failed.survivors;
}

absl::StatusOr<std::vector<PoolWorker>> JobRunner::Recover(const absl::Status& failure,
                                                           const std::vector<std::string>& lost,
                                                           bool counted) {
  if (supply_ == nullptr) return failure;
  ++job_.outcome().recoveries;
  if (counted) ++counted_recoveries_;
  const absl::Duration timeout = absl::Seconds(job_.spec().recovery().recovery_timeout_seconds());
  supply_->Recovering(lost, failure, timeout);
  events_.DropOffers();  // the supply took back whatever it had offered
  // The supply answers within `timeout`; the margin is for its scheduling round.
  absl::StatusOr<std::vector<PoolWorker>> workers = events_.AwaitWorkers(timeout + kSupplyMargin);
  if (workers.ok() || absl::IsCancelled(workers.status()) || events_.draining()) return workers;
  return absl::Status(
      failure.code(),
      absl::StrCat(failure.message(), "; recovery failed: ", workers.status().message()));
}

}  // namespace lockstep
