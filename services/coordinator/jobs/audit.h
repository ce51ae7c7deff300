// The job's audit, the coordinator's side (JobSpec.audit, docs/audit.md): which steps are
// audited and by whom (AuditPlan), and what the answers say (JudgeAudit).
//
// At an audited step the audited rank answers the digest of the local gradients it fed
// into the all-reduce (StepCommand.want_grad_digest), and one checker (two with 3 or more
// workers: the second breaks a tie) recomputes that rank's shard at the same state, before
// its own step of the same command (StepCommand.audit). The digests and local losses must
// agree bitwise. Plain functions of the spec and the answers: no I/O, no threads.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOBS_AUDIT_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOBS_AUDIT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/commands.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

// Who takes part in one step's audit, by rank.
struct AuditPick {
  int audited = -1;
  std::vector<int> checkers;  // recompute the audited rank's shard: one, or two (a tie-break)
};

class AuditPlan {
 public:
  // `threads[r]`: what rank r computes with (its CPU threads; any one value for cuda):
  // only ranks of equal threads are compared, so that a shard has the same bits on both
  // (shards are all B/N rows: the spec's validation requires B % N == 0).
  // With `shared_statistics` (a BatchNorm model not on logical replicas) no shard is
  // audited: a shard's gradients depend on every shard's statistics, all-reduced in
  // floats. On logical replicas a BatchNorm model's shard is audited: the checkers
  // compute the audited replica beside their own (StepExecutor::RideAlong).
  AuditPlan(const v1::JobSpec& spec, std::vector<uint32_t> threads, bool shared_statistics = false);

  // Whether step `step` (from 0) is audited, and by whom: every audit.every_steps steps
  // (the steps that complete a multiple of it), and with the audit on each step the job
  // snapshots after (`snapshot`: a snapshot holds a state an audit passed); a rank picked
  // at random with its checkers, by an RNG of the plan's own seeded from the spec's seed
  // and keyed by the step, so that a replay (or a restarted coordinator) audits the same
  // steps alike. None when the audit is off, the step is not due, or no other rank has the
  // audited rank's threads.
  std::optional<AuditPick> Pick(int64_t step, bool snapshot = false) const;

 private:
  uint64_t every_;
  uint64_t seed_;
  std::vector<uint32_t> threads_;
};

struct AuditVerdict {
  bool passed = false;
  std::vector<int> liars;     // ranks outvoted by two agreeing others (quarantine them)
  std::vector<int> suspects;  // no majority (two answers differ, or three do): all of them
  std::string detail;         // what was compared, with the digests, for events and errors
};

// Compares the audited rank's digest and local loss (got[pick.audited].grad_digest, .loss;
// with logical replicas its first replica's, .replica_losses[0]; a BatchNorm model's
// statistics digest too, .stats_digest) with each checker's recomputation
// (got[c].audit_digest, .audit_loss, .audit_stats_digest), bitwise. A checker
// that did not recompute (audited false) disagrees. `ids[r]` names rank r in `detail`.
AuditVerdict JudgeAudit(const AuditPick& pick, const std::vector<StepResult>& got,
                        const std::vector<std::string>& ids);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOBS_AUDIT_H_
