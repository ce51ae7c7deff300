// What a job does after an attempt ends: Next(job, end, free_workers, policy) -> Action, a
// pure function of plain values (no threads, no I/O), so that every combination is
// unit-tested (decision_test.cc) and the docs' state machine is this table, generated from
// it (DecisionTableMarkdown: docs/elastic.md, "The decision table"; README.md, "Faults").
//
// The table is data: rules tried in order, the first whose conditions all hold decides.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOBS_DECISION_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOBS_DECISION_H_

#include <span>
#include <string>

#include "services/coordinator/jobs/attempt_end.h"

namespace lockstep {

// The job as the decision sees it.
struct JobFacts {
  int workers = 0;     // the attempt's
  int recoveries = 0;  // recoveries from a snapshot so far (those counted)
};

// What the job's spec and its runner allow.
struct Policy {
  bool recovers = false;  // workers can be had again (a coordinator; not `lockstep train`)
  bool elastic = false;   // logical replicas (JobSpec.replicas): any count from min_workers
  int min_workers = 1;
  int max_restarts = 0;  // recovery.max_restarts
};

struct Action {
  enum Kind {
    kFinish,   // the job succeeded
    kFail,     // the job failed with the attempt's reason
    kCancel,   // the job stops with its abort's reason (CANCELLED for a user)
    kSuspend,  // the job stops to continue later from its snapshot (drain, preemption)
    kResize,   // go on at once with the workers staying and joining, from their own state
    kShrink,   // go on at once with the survivors, from the state they hold
    kRecover,  // release the workers, wait for enough, continue from the snapshot
  };
  Kind kind = kFail;
  bool counted = false;  // kRecover: counts against recovery.max_restarts
  int rule = 0;          // the rule that decided (1-based, as in the docs' table)
};

// The workers the job can go on with at once, without waiting for the scheduler: after a
// failure its survivors, at a resize those staying and joining; else its workers.
int FreeWorkers(const AttemptEnd& end, int workers);

Action Next(const JobFacts& job, const AttemptEnd& end, int free_workers, const Policy& policy);

// The table as data. Each condition is required to hold (kYes), to fail (kNo), or ignored.
enum class Cond { kAny, kYes, kNo };
enum class EndKind { kFinished, kCancelled, kDrained, kSuspended, kResizeAt, kFailed };
struct Rule {
  EndKind end;
  Cond elastic = Cond::kAny;        // Policy::elastic
  Cond recovers = Cond::kAny;       // Policy::recovers
  Cond leaving = Cond::kAny;        // ResizeAt: some workers leave
  Cond enough = Cond::kAny;         // free_workers >= max(1, min_workers)
  Cond someone_lost = Cond::kAny;   // Failed: a worker no longer answers
  Cond workers_fault = Cond::kAny;  // Failed: lost, unreachable, late, aborted or audited
  Cond audit = Cond::kAny;          // Failed: an audit found workers to replace
  Cond reached = Cond::kAny;        // Failed: the attempt had reached its steps
  Cond restarts_left = Cond::kAny;  // recoveries < max_restarts
  Action::Kind action;
  bool counted = false;
  const char* why;  // the rule in words, for the docs
};
std::span<const Rule> DecisionTable();

EndKind KindOf(const AttemptEnd& end);
const char* EndName(EndKind end);
const char* ActionName(Action::Kind kind);

// The table in Markdown (one row per rule), and the short list of README.md's Faults
// section (one line per rule).
std::string DecisionTableMarkdown();
std::string DecisionSummaryMarkdown();

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOBS_DECISION_H_
