// Attempt, an elastic job's kept states (docs/elastic.md, "Resizing a running job"): after
// a resize the survivors continue from the state they hold, which must agree; where some
// completed steps with a lost worker that never answered, those steps are reported from the
// survivors' all-reduce and the job goes on from there; after a failed step, the steps
// every worker answered before it still count.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/spec/spec.h"
#include "core/status_macros.h"
#include "services/common/observability/job_log.h"
#include "services/coordinator/jobs/attempt.h"

namespace lockstep {
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

int64_t Attempt::CountAnswered(StepFanout& fanout, int64_t done, int64_t total, int64_t spe) {
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
    job_.ReportStep(*std::move(e), done, total, spe);
    if (EvalDue(job_.spec().eval(), done, spe) && done < total) job_.set_eval_owed(done);
  }
  return done;
}

absl::Status Attempt::CheckKeptStates(
    const std::vector<absl::StatusOr<PrepareResult>>& resp) const {
  const Start& start = job_.start();
  auto abort = [&](size_t r, absl::string_view what) {
    return WorkerError(
        static_cast<int>(r),
        absl::AbortedError(absl::StrCat(what, "; the job recovers from its snapshot of step ",
                                        job_.fallback_step(), " instead")));
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
  int64_t last = start.step;  // the furthest a survivor got
  for (const auto& p : resp) last = std::max(last, p->step);
  // The first rank at start.step and the first past it, which the others must agree with.
  const PrepareResult *at_start = nullptr, *past = nullptr;
  size_t past_rank = 0;
  for (size_t r = 0; r < resp.size(); ++r) {
    const PrepareResult& p = *resp[r];
    const bool ahead = p.step > start.step;
    if (p.step != start.step && p.step != last) {
      return abort(r, absl::StrCat("holds step ", p.step, " where others hold steps ", start.step,
                                   " and ", last));
    }
    const PrepareResult*& first = ahead ? past : at_start;
    if (first == nullptr) {
      first = &p;
      if (ahead) past_rank = r;
    }
    const uint64_t want = !ahead && start.checksum != 0 ? start.checksum : first->param_checksum;
    if (p.param_checksum != want) {
      return abort(r, absl::StrFormat("holds params with checksum %016x at step %d, not %016x",
                                      p.param_checksum, p.step, want));
    }
    if (ahead && !SameSteps(p.ahead, first->ahead)) {
      return abort(r, absl::StrCat("its replica losses of steps ", start.step + 1, " to ", last,
                                   " differ from another survivor's"));
    }
  }
  if (past == nullptr) return absl::OkStatus();
  const int v = LogicalWorld(job_.spec());
  for (int64_t s = start.step + 1; s <= last; ++s) {
    const size_t i = static_cast<size_t>(s - start.step - 1);
    if (i >= past->ahead.size() || past->ahead[i].step != s ||
        static_cast<int>(past->ahead[i].losses.size()) != v ||
        past->ahead[i].accuracies.size() != past->ahead[i].losses.size()) {
      return abort(past_rank,
                   absl::StrCat("holds step ", last, " without every replica's loss of step ", s));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Attempt::CatchUp(const std::vector<absl::StatusOr<PrepareResult>>& resp) {
  const int64_t from = job_.start().step;
  int lead = -1;  // the first rank past the start
  bool all = true;
  for (size_t r = 0; r < resp.size(); ++r) {
    if (resp[r]->step == from) {
      all = false;
    } else if (lead < 0) {
      lead = static_cast<int>(r);
    }
  }
  if (lead < 0) return false;
  const PrepareResult& p = *resp[lead];
  *job_.ahead() = p.ahead;
  Start caught_up;
  caught_up.step = p.step;
  caught_up.checksum = p.param_checksum;
  caught_up.kept_ranks = job_.start().kept_ranks;
  if (!all) {  // the others get the state of one that completed them
    ASSIGN_OR_RETURN(TrainState state,
                     clients_[lead]->FetchState(job_.id(), *cancel_, job_.options().rpc_timeout));
    if (state.step != p.step ||
        ParamChecksum(state.params, state.batch_stats) != p.param_checksum) {
      return WorkerError(lead, absl::DataLossError(absl::StrCat(
                                   "the state it sent is not the one it holds at step ", p.step)));
    }
    caught_up.held = std::move(state);
    caught_up.kept_ranks = 0;
  }
  job_.KeepState(std::move(caught_up));
  done_ = p.step;
  const std::string why = absl::StrCat(
      all ? "every survivor" : "a survivor", " had completed step",
      p.step - from > 1 ? absl::StrCat("s ", from + 1, " to ") : " ", p.step,
      " with the lost worker, which never answered: reported from the survivors' all-reduce "
      "(every replica's loss); continuing from step ",
      p.step, all ? "" : " (the others get its state)");
  LogJob(spdlog::level::info, {job_.id()}, why);
  job_.sink()->OnNote(why);
  return !all;
}

absl::Status Attempt::ReportAhead(int64_t total, int64_t spe) {
  std::vector<CompletedStep> steps = std::move(*job_.ahead());
  job_.ahead()->clear();
  for (const CompletedStep& c : steps) {
    StepResult all;  // one rank holding every replica
    all.replica_losses = c.losses;
    all.replica_accuracies = c.accuracies;
    ASSIGN_OR_RETURN(v1::StepEvent e, Aggregate({all}, c.step - 1, false));
    e.clear_worker_times();  // no worker's answer came
    job_.ReportStep(std::move(e), c.step, total, spe);
    if (EvalDue(job_.spec().eval(), c.step, spe) && c.step < total) {
      // The step loop holds the pipeline after an evaluation's step: it is the last here.
      if (c.step != job_.start().step) {
        return absl::AbortedError(absl::StrCat("step ", c.step, "'s evaluation was skipped"));
      }
      job_.set_eval_owed(c.step);
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep
