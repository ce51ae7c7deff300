// JobRunner, an elastic job's resize (docs/elastic.md): when workers of a job on logical
// replicas are lost and at least its min_workers survive, the survivors go on at once from
// the state they hold at the last completed step (a failed step changes no state), over a
// collective re-formed among them (a new rendezvous namespace), each computing a new range
// of the replicas; only the step in flight is computed again. Their checksums must agree;
// where anything does not, the job falls back to today's recovery from its snapshot.
// Grow: below its max workers, the job takes free workers at a step boundary (drained),
// sends them the state fetched from rank 0 and keeps the others' where it is.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/spec/spec.h"
#include "core/status_macros.h"
#include "services/common/job_log.h"
#include "services/coordinator/job_runner.h"

namespace lockstep {

bool JobRunner::Shrink(const absl::Status& failure, const std::vector<bool>& alive,
                       JobOutcome* outcome) {
  if (!logical() || supply_ == nullptr || done_ < 0 || !audit_lost_.empty()) return false;
  std::vector<PoolWorker> survivors;
  std::vector<std::string> lost;
  for (size_t r = 0; r < workers_.size(); ++r) {
    if (r < alive.size() && alive[r]) {
      survivors.push_back(workers_[r]);
    } else {
      lost.push_back(workers_[r].id);
    }
  }
  if (lost.empty() || static_cast<int>(survivors.size()) < MinWorkers(spec_)) return false;
  if (!start_.kept) fallback_ = start_;  // a resize that fails goes back to the snapshot
  if (start_.kept && start_.held.has_value() && start_.step == done_) {
    // A grow that failed (a worker lost while it prepared): the state it fetched is here,
    // checked; every survivor gets it, whether or not its own Prepare kept one.
    kept_ranks_ = 0;
  } else {
    Start kept;
    kept.step = done_;
    kept.kept = true;
    kept.checksum = done_checksum_step_ == done_ ? done_checksum_ : 0;
    start_ = std::move(kept);
    kept_ranks_ = static_cast<int>(survivors.size());
  }
  const std::string why =
      absl::StrCat("resized ", workers_.size(), " -> ", survivors.size(), " workers: worker",
                   lost.size() > 1 ? "s " : " ", absl::StrJoin(lost, ", "), " lost (",
                   failure.message(), "); continuing from step ", done_);
  LogJob(spdlog::level::warn, {job_id_}, why);
  supply_->Resized(survivors, lost, why);
  outcome->unreachable.clear();  // dropped by Resized
  ++outcome->resizes;
  Connect(std::move(survivors));
  ++attempt_number_;
  {
    absl::MutexLock lock(&attempt_mu_);
    attempt_ = std::make_shared<CancelToken>();
  }
  if (!cancel_.status().ok()) attempt()->Cancel(cancel_.status());  // raced with an Abort
  return true;
}

bool JobRunner::GrowDue() {
  const int most = static_cast<int>(spec_.workers()) - static_cast<int>(workers_.size());
  if (!logical() || supply_ == nullptr || most <= 0) return false;
  joining_ = supply_->Offer(most);
  return !joining_.empty();
}

absl::Status JobRunner::StopToGrow(int64_t done) {
  ASSIGN_OR_RETURN(TrainState state,
                   clients_[0]->FetchState(job_id_, *attempt(), options_.rpc_timeout));
  if (state.step != done) {
    return WorkerError(0, absl::DataLossError(absl::StrCat("holds step ", state.step,
                                                           " where the job completed ", done)));
  }
  if (!start_.kept) fallback_ = start_;  // a grow that fails goes back to the snapshot
  Start kept;
  kept.step = done;
  kept.kept = true;
  kept.checksum = ParamChecksum(state.params, state.batch_stats);
  kept.held = std::move(state);
  start_ = std::move(kept);
  kept_ranks_ = static_cast<int>(workers_.size());
  growing_ = true;
  // Ends the step loop and the attempt; Run goes on with Grow.
  return absl::AbortedError(absl::StrCat("workers join at step ", done));
}

void JobRunner::Grow(JobOutcome* outcome) {
  growing_ = false;
  std::vector<PoolWorker> workers = workers_;
  std::vector<std::string> ids;
  for (PoolWorker& w : joining_) {
    ids.push_back(w.id);
    workers.push_back(std::move(w));
  }
  joining_.clear();
  const std::string why =
      absl::StrCat("resized ", workers_.size(), " -> ", workers.size(), " workers: worker",
                   ids.size() > 1 ? "s " : " ", absl::StrJoin(ids, ", "),
                   " joined; continuing from step ", start_.step);
  LogJob(spdlog::level::info, {job_id_}, why);
  supply_->Resized(workers, {}, why);
  ++outcome->resizes;
  Connect(std::move(workers));
  ++attempt_number_;
  absl::MutexLock lock(&attempt_mu_);
  attempt_ = std::make_shared<CancelToken>();
  if (!cancel_.status().ok()) attempt_->Cancel(cancel_.status());
}

int64_t JobRunner::CountAnswered(StepFanout& fanout, int64_t done, int64_t total, int64_t spe) {
  while (done < total) {
    absl::StatusOr<std::vector<StepResult>> got = fanout.TakeAnswered(done);
    if (!got.ok()) break;
    // Checked when the checksums came with it; they must agree as in the step loop.
    const bool checked = (*got)[0].param_checksum != 0;
    absl::StatusOr<v1::StepEvent> e = Aggregate(*got, done, checked);
    if (!e.ok()) break;
    ++done;
    done_ = done;
    if (checked) {
      done_checksum_ = (*got)[0].param_checksum;
      done_checksum_step_ = done;
    }
    if (done <= high_water_) e->set_replay(true);
    high_water_ = std::max(high_water_, done);
    e->set_step(done);
    e->set_epoch((done - 1) / spe);
    e->set_total_steps(total);
    sink_->OnStep(*e);
    if (EvalDue(spec_.eval(), done, spe) && done < total) eval_owed_ = done;
  }
  return done;
}

absl::Status JobRunner::CheckKeptStates(
    const std::vector<absl::StatusOr<PrepareResult>>& resp) const {
  auto abort = [&](size_t r, absl::string_view what) {
    return WorkerError(
        static_cast<int>(r),
        absl::AbortedError(absl::StrCat(what, "; the job recovers from its snapshot of step ",
                                        fallback_.has_value() ? fallback_->step : 0, " instead")));
  };
  // The rank that failed first is named, not those its failure cancelled.
  for (size_t r = 0; r < resp.size(); ++r) {
    if (!resp[r].ok() && !absl::IsCancelled(resp[r].status())) {
      return abort(
          r, absl::StrCat("could not continue from its own state: ", resp[r].status().message()));
    }
  }
  for (size_t r = 0; r < resp.size(); ++r) {
    if (!resp[r].ok()) return resp[r].status();
    const uint64_t want = start_.checksum != 0 ? start_.checksum : resp[0]->param_checksum;
    if (resp[r]->param_checksum != want) {
      return abort(r, absl::StrFormat("holds params with checksum %016x at step %d, not %016x",
                                      resp[r]->param_checksum, start_.step, want));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep
