// The decision table (decision.h): its rules, Next over them, and their Markdown.
#include "services/coordinator/jobs/decision.h"

#include <algorithm>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace {

using C = Cond;
using A = Action;

// First match wins. Keep docs/elastic.md and README.md in step: decision_test compares them
// with DecisionTableMarkdown and DecisionSummaryMarkdown.
constexpr Rule kRules[] = {
    {.end = EndKind::kCancelled,
     .action = A::kCancel,
     .why = "an abort (a user's cancel, the coordinator's stop) wins: the job ends with its "
            "reason"},
    {.end = EndKind::kDrained,
     .action = A::kSuspend,
     .why = "the coordinator drains: RECOVERING, continued from the snapshot once a "
            "coordinator is back"},
    {.end = EndKind::kSuspended,
     .action = A::kSuspend,
     .why = "preempted by a job of higher priority: SUSPENDED, back in the queue, continued "
            "from the snapshot"},
    {.end = EndKind::kFinished, .action = A::kFinish, .why = "the job SUCCEEDED"},
    {.end = EndKind::kResizeAt,
     .elastic = C::kNo,
     .leaving = C::kYes,
     .action = A::kRecover,
     .why = "workers leave a job that is not elastic: it recovers from the snapshot taken at "
            "the boundary on replacements, nothing replayed, not counted"},
    {.end = EndKind::kResizeAt,
     .leaving = C::kYes,
     .enough = C::kNo,
     .action = A::kRecover,
     .why = "workers leave a job that would drop below its min: as above"},
    {.end = EndKind::kResizeAt,
     .action = A::kResize,
     .why = "workers join or leave an elastic job: it goes on with the new membership from "
            "the state its workers hold, nothing computed again"},
    {.end = EndKind::kFailed,
     .elastic = C::kYes,
     .recovers = C::kYes,
     .enough = C::kYes,
     .someone_lost = C::kYes,
     .audit = C::kNo,
     .reached = C::kYes,
     .action = A::kShrink,
     .why = "an elastic job lost workers and enough survive: it goes on with them from the "
            "last completed step, only the step in flight computed again, not counted"},
    {.end = EndKind::kFailed,
     .recovers = C::kYes,
     .workers_fault = C::kYes,
     .restarts_left = C::kYes,
     .action = A::kRecover,
     .counted = true,
     .why = "workers were lost, late or found lying: RECOVERING, the job waits for "
            "healthy workers and replays from its snapshot; counted against max_restarts"},
    {.end = EndKind::kFailed,
     .action = A::kFail,
     .why = "anything else (a bad spec, a missing dataset, diverged replicas, no restarts "
            "left, no recovery): FAILED"},
};

bool Holds(Cond c, bool value) { return c == C::kAny || (c == C::kYes) == value; }

// What a rule's conditions look at.
struct Features {
  EndKind end;
  bool elastic, recovers, leaving, enough, someone_lost, workers_fault, audit, reached,
      restarts_left;
};

bool Matches(const Rule& r, const Features& f) {
  return r.end == f.end && Holds(r.elastic, f.elastic) && Holds(r.recovers, f.recovers) &&
         Holds(r.leaving, f.leaving) && Holds(r.enough, f.enough) &&
         Holds(r.someone_lost, f.someone_lost) && Holds(r.workers_fault, f.workers_fault) &&
         Holds(r.audit, f.audit) && Holds(r.reached, f.reached) &&
         Holds(r.restarts_left, f.restarts_left);
}

// A failure that new workers may fix: theirs, not the job's settings'.
bool WorkersFault(const Failed& f) {
  const absl::StatusCode code = f.why.code();
  return !f.lost.empty() || !f.audit_lost.empty() || code == absl::StatusCode::kUnavailable ||
         code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kAborted;
}

// A rule's conditions in words ("" for none).
std::string When(const Rule& r) {
  std::vector<std::string> parts;
  auto add = [&](Cond c, const char* yes, const char* no) {
    if (c != C::kAny) parts.push_back(c == C::kYes ? yes : no);
  };
  add(r.elastic, "elastic", "not elastic");
  add(r.recovers, "can get workers", "cannot get workers");
  add(r.leaving, "workers leave", "no worker leaves");
  add(r.enough, "at least min workers at hand", "fewer than min at hand");
  add(r.someone_lost, "a worker lost", "no worker lost");
  add(r.workers_fault, "the workers' fault", "not the workers' fault");
  add(r.audit, "an audit failed", "no audit failed");
  add(r.reached, "steps reached", "steps not reached");
  add(r.restarts_left, "restarts left", "no restarts left");
  return absl::StrJoin(parts, ", ");
}

}  // namespace

std::span<const Rule> DecisionTable() { return kRules; }

EndKind KindOf(const AttemptEnd& end) {
  static_assert(std::is_same_v<
                    std::variant_alternative_t<static_cast<size_t>(EndKind::kResizeAt), AttemptEnd>,
                    ResizeAt>,
                "EndKind follows AttemptEnd's order");
  return static_cast<EndKind>(end.index());
}

const char* EndName(EndKind end) {
  switch (end) {
    case EndKind::kFinished:
      return "Finished";
    case EndKind::kCancelled:
      return "Cancelled";
    case EndKind::kDrained:
      return "Drained";
    case EndKind::kSuspended:
      return "Suspended";
    case EndKind::kResizeAt:
      return "ResizeAt";
    case EndKind::kFailed:
      return "Failed";
  }
  return "?";
}

const char* ActionName(Action::Kind kind) {
  switch (kind) {
    case A::kFinish:
      return "finish";
    case A::kFail:
      return "fail";
    case A::kCancel:
      return "cancel";
    case A::kSuspend:
      return "suspend";
    case A::kResize:
      return "resize";
    case A::kShrink:
      return "shrink";
    case A::kRecover:
      return "recover";
  }
  return "?";
}

int FreeWorkers(const AttemptEnd& end, int workers) {
  if (const auto* f = std::get_if<Failed>(&end)) return static_cast<int>(f->survivors.size());
  if (const auto* r = std::get_if<ResizeAt>(&end)) {
    return workers - static_cast<int>(r->leaving.size()) + static_cast<int>(r->joining.size());
  }
  return workers;
}

Action Next(const JobFacts& job, const AttemptEnd& end, int free_workers, const Policy& policy) {
  const auto* failed = std::get_if<Failed>(&end);
  const auto* resize = std::get_if<ResizeAt>(&end);
  const Features f{
      .end = KindOf(end),
      .elastic = policy.elastic,
      .recovers = policy.recovers,
      .leaving = resize != nullptr && !resize->leaving.empty(),
      .enough = free_workers >= std::max(1, policy.min_workers),
      .someone_lost = failed != nullptr && !failed->lost.empty(),
      .workers_fault = failed != nullptr && WorkersFault(*failed),
      .audit = failed != nullptr && !failed->audit_lost.empty(),
      .reached = failed != nullptr && failed->completed >= 0,
      .restarts_left = job.recoveries < policy.max_restarts,
  };
  for (size_t i = 0; i < std::size(kRules); ++i) {
    if (Matches(kRules[i], f))
      return {kRules[i].action, kRules[i].counted, static_cast<int>(i + 1)};
  }
  return {A::kFail, false, 0};  // unreachable: each end kind's last rule takes anything
}

std::string DecisionTableMarkdown() {
  std::string out =
      "| # | the attempt ended | when | the job does | what happens |\n"
      "|---|---|---|---|---|\n";
  for (size_t i = 0; i < std::size(kRules); ++i) {
    const Rule& r = kRules[i];
    const std::string when = When(r);
    absl::StrAppend(&out, "| ", i + 1, " | ", EndName(r.end), " | ", when.empty() ? "-" : when,
                    " | ", ActionName(r.action), r.counted ? " (counted)" : "", " | ", r.why,
                    " |\n");
  }
  return out;
}

std::string DecisionSummaryMarkdown() {
  std::string out;
  for (size_t i = 0; i < std::size(kRules); ++i) {
    const Rule& r = kRules[i];
    const std::string when = When(r);
    absl::StrAppend(&out, i + 1, ". ", EndName(r.end), when.empty() ? "" : " (", when,
                    when.empty() ? "" : ")", ": **", ActionName(r.action),
                    r.counted ? "** (counted)\n" : "**\n");
  }
  return out;
}

}  // namespace lockstep
