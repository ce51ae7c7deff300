// JobRunner, an elastic job's resize (docs/elastic.md): when workers of a job on logical
// replicas are lost and at least its min_workers survive, the survivors go on at once from
// the state they hold at the last completed step (a failed step changes no state), over a
// collective re-formed among them (a new rendezvous namespace), each computing a new range
// of the replicas; only the step in flight is computed again. Their checksums must agree;
// where anything does not, the job falls back to today's recovery from its snapshot.
// At a step boundary (drained), the job also resizes on purpose: below its max workers it
// takes free workers (grow: they get the state fetched from rank 0, the others keep
// theirs), and it lets workers go that ReleaseWorkers named (a worker leaving on SIGTERM,
// a preemption): the others keep their state, nothing is computed again. A job that
// cannot go on without them recovers from a snapshot taken at that boundary instead.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

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
  supply_->Resized(survivors, lost, why, {});
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

void JobRunner::ReleaseWorkers(std::vector<std::string> ids, std::string why) {
  absl::MutexLock lock(&attempt_mu_);
  for (std::string& id : ids) releasing_[std::move(id)] = why;
}

bool JobRunner::ReleaseDue() {
  if (supply_ == nullptr) return false;
  BoundaryResize resize;
  // The workers named for each reason, in the order the reasons first come in rank order.
  std::vector<std::pair<std::string, std::vector<std::string>>> by_why;
  {
    absl::MutexLock lock(&attempt_mu_);
    if (releasing_.empty()) return false;
    for (const PoolWorker& w : workers_) {
      auto it = releasing_.find(w.id);
      if (it == releasing_.end()) continue;
      resize.leaving.push_back(w.id);
      auto same = std::find_if(by_why.begin(), by_why.end(),
                               [&](const auto& group) { return group.first == it->second; });
      if (same == by_why.end()) {
        same = by_why.emplace(by_why.end(), it->second, std::vector<std::string>());
      }
      same->second.push_back(w.id);
    }
  }
  if (resize.leaving.empty()) return false;
  std::vector<std::string> parts;
  for (const auto& [why, ids] : by_why) {
    parts.push_back(
        absl::StrCat("worker", ids.size() > 1 ? "s " : " ", absl::StrJoin(ids, ", "), " ", why));
  }
  resize.why = absl::StrJoin(parts, "; ");
  const int left = static_cast<int>(workers_.size() - resize.leaving.size());
  resize.recover = !logical() || left < std::max(1, MinWorkers(spec_));
  resize_ = std::move(resize);
  return true;
}

bool JobRunner::GrowDue() {
  const int most = static_cast<int>(spec_.workers()) - static_cast<int>(workers_.size());
  if (!logical() || supply_ == nullptr || most <= 0) return false;
  std::vector<PoolWorker> joining = supply_->Offer(most);
  if (joining.empty()) return false;
  std::vector<std::string> ids;
  for (const PoolWorker& w : joining) ids.push_back(w.id);
  resize_ = BoundaryResize{
      std::move(joining),
      {},
      absl::StrCat("worker", ids.size() > 1 ? "s " : " ", absl::StrJoin(ids, ", "), " joined")};
  return true;
}

absl::Status JobRunner::StopToResize(int64_t done, uint64_t checksum) {
  if (resize_->recover) {  // the hold's snapshot (TakeSnapshot) is the next attempt's start
    resize_->stopped = true;
    return absl::UnavailableError(
        absl::StrCat(resize_->why, ": the job cannot go on without ",
                     resize_->leaving.size() > 1 ? "them" : "it",
                     logical() ? absl::StrCat(" (fewer than ", MinWorkers(spec_), " workers left)")
                               : std::string(" (not elastic)"),
                     "; it continues from its snapshot of step ", done, " on replacements"));
  }
  if (!start_.kept) fallback_ = start_;  // a resize that fails goes back to the snapshot
  Start kept;
  kept.step = done;
  kept.kept = true;
  kept.checksum = checksum;
  if (!resize_->joining.empty()) {  // the newcomers' state, from rank 0
    ASSIGN_OR_RETURN(TrainState state,
                     clients_[0]->FetchState(job_id_, *attempt(), options_.rpc_timeout));
    if (state.step != done) {
      return WorkerError(0, absl::DataLossError(absl::StrCat("holds step ", state.step,
                                                             " where the job completed ", done)));
    }
    kept.checksum = ParamChecksum(state.params, state.batch_stats);
    kept.held = std::move(state);
  }
  start_ = std::move(kept);
  kept_ranks_ = static_cast<int>(workers_.size() - resize_->leaving.size());
  resize_->stopped = true;
  // Ends the step loop and the attempt; Run goes on with Resize.
  return absl::AbortedError(absl::StrCat("resize at step ", done, ": ", resize_->why));
}

void JobRunner::Resize(JobOutcome* outcome) {
  BoundaryResize resize = *std::move(resize_);
  resize_.reset();
  // The workers that stay keep their ranks' order (and their state: ranks [0, kept_ranks_)).
  std::vector<PoolWorker> workers;
  std::vector<int> leaving;
  for (size_t r = 0; r < workers_.size(); ++r) {
    const bool goes = std::find(resize.leaving.begin(), resize.leaving.end(), workers_[r].id) !=
                      resize.leaving.end();
    if (goes) {
      leaving.push_back(static_cast<int>(r));
    } else {
      workers.push_back(workers_[r]);
    }
  }
  for (PoolWorker& w : resize.joining) workers.push_back(std::move(w));
  const std::string why =
      absl::StrCat("resized ", workers_.size(), " -> ", workers.size(), " workers: ", resize.why,
                   "; continuing from step ", start_.step);
  LogJob(spdlog::level::info, {job_id_}, why);
  // Released now: each drops its replica (its collective aborted), and may leave.
  for (int r : leaving) {
    clients_[r]->Release(job_id_, why, options_.release_timeout).IgnoreError();
  }
  {
    absl::MutexLock lock(&attempt_mu_);
    for (const std::string& id : resize.leaving) releasing_.erase(id);
  }
  supply_->Resized(workers, {}, why, resize.leaving);
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

namespace {

// Bitwise: the survivors learned the same floats in the same all-reduce.
bool SameSteps(const std::vector<CompletedStep>& a, const std::vector<CompletedStep>& b) {
  auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() &&
           (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
  };
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [&](const auto& p, const auto& q) {
    return p.step == q.step && same(p.losses, q.losses) && same(p.accuracies, q.accuracies);
  });
}

}  // namespace

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
  }
  int64_t last = start_.step;  // the furthest a survivor got
  for (const auto& p : resp) last = std::max(last, p->step);
  // The first rank at start_.step and the first past it, which the others must agree with.
  const PrepareResult *at_start = nullptr, *past = nullptr;
  size_t past_rank = 0;
  for (size_t r = 0; r < resp.size(); ++r) {
    const PrepareResult& p = *resp[r];
    const bool ahead = p.step > start_.step;
    if (p.step != start_.step && p.step != last) {
      return abort(r, absl::StrCat("holds step ", p.step, " where others hold steps ", start_.step,
                                   " and ", last));
    }
    const PrepareResult*& first = ahead ? past : at_start;
    if (first == nullptr) {
      first = &p;
      if (ahead) past_rank = r;
    }
    const uint64_t want = !ahead && start_.checksum != 0 ? start_.checksum : first->param_checksum;
    if (p.param_checksum != want) {
      return abort(r, absl::StrFormat("holds params with checksum %016x at step %d, not %016x",
                                      p.param_checksum, p.step, want));
    }
    if (ahead && !SameSteps(p.ahead, first->ahead)) {
      return abort(r, absl::StrCat("its replica losses of steps ", start_.step + 1, " to ", last,
                                   " differ from another survivor's"));
    }
  }
  if (past == nullptr) return absl::OkStatus();
  const int v = LogicalWorld(spec_);
  for (int64_t s = start_.step + 1; s <= last; ++s) {
    const size_t i = static_cast<size_t>(s - start_.step - 1);
    if (i >= past->ahead.size() || past->ahead[i].step != s ||
        static_cast<int>(past->ahead[i].losses.size()) != v ||
        past->ahead[i].accuracies.size() != past->ahead[i].losses.size()) {
      return abort(past_rank,
                   absl::StrCat("holds step ", last, " without every replica's loss of step ", s));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> JobRunner::CatchUp(const std::vector<absl::StatusOr<PrepareResult>>& resp) {
  int lead = -1;  // the first rank past start_.step
  bool all = true;
  for (size_t r = 0; r < resp.size(); ++r) {
    if (resp[r]->step == start_.step) {
      all = false;
    } else if (lead < 0) {
      lead = static_cast<int>(r);
    }
  }
  if (lead < 0) return false;
  const PrepareResult& p = *resp[lead];
  const int64_t from = start_.step;
  ahead_ = p.ahead;
  Start caught_up;
  caught_up.step = p.step;
  caught_up.kept = true;
  caught_up.checksum = p.param_checksum;
  if (!all) {  // the others get the state of one that completed them
    ASSIGN_OR_RETURN(TrainState state,
                     clients_[lead]->FetchState(job_id_, *attempt(), options_.rpc_timeout));
    if (state.step != p.step ||
        ParamChecksum(state.params, state.batch_stats) != p.param_checksum) {
      return WorkerError(lead, absl::DataLossError(absl::StrCat(
                                   "the state it sent is not the one it holds at step ", p.step)));
    }
    caught_up.held = std::move(state);
    kept_ranks_ = 0;
  }
  start_ = std::move(caught_up);
  done_ = start_.step;
  const std::string why = absl::StrCat(
      all ? "every survivor" : "a survivor", " had completed step",
      p.step - from > 1 ? absl::StrCat("s ", from + 1, " to ") : " ", p.step,
      " with the lost worker, which never answered: reported from the survivors' all-reduce "
      "(every replica's loss); continuing from step ",
      p.step, all ? "" : " (the others get its state)");
  LogJob(spdlog::level::info, {job_id_}, why);
  sink_->OnNote(why);
  return !all;
}

absl::Status JobRunner::ReportAhead(int64_t total, int64_t spe) {
  std::vector<CompletedStep> steps = std::move(ahead_);
  ahead_.clear();
  for (const CompletedStep& c : steps) {
    StepResult all;  // one rank holding every replica
    all.replica_losses = c.losses;
    all.replica_accuracies = c.accuracies;
    ASSIGN_OR_RETURN(v1::StepEvent e, Aggregate({all}, c.step - 1, false));
    e.clear_worker_times();  // no worker's answer came
    if (c.step <= high_water_) e.set_replay(true);
    high_water_ = std::max(high_water_, c.step);
    e.set_step(c.step);
    e.set_epoch((c.step - 1) / spe);
    e.set_total_steps(total);
    sink_->OnStep(e);
    if (EvalDue(spec_.eval(), c.step, spe) && c.step < total) {
      // The step loop holds the pipeline after an evaluation's step: it is the last here.
      if (c.step != start_.step) {
        return absl::AbortedError(absl::StrCat("step ", c.step, "'s evaluation was skipped"));
      }
      eval_owed_ = c.step;
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep
