// The coordinator's side of logical replicas (JobSpec.replicas, docs/elastic.md): which
// rows and dropout keys of a step each worker computes, and how the V replicas' losses
// and a split evaluation come back together. Each result is a function of the V
// replicas' answers in replica order, never of how many workers computed them.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOBS_LOGICAL_DISPATCH_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOBS_LOGICAL_DISPATCH_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/commands.h"
#include "core/plan.h"

namespace lockstep {

// Worker r's part of a step: its replicas' rows back to back and their keys, in replica
// order (pointing into the StepPlan).
struct WorkerShare {
  ReplicaRange range;
  std::span<const int32_t> rows;
  std::span<const rng::Key> keys;
};
// The shares of `n` workers in a step planned for `v` replicas (plan.keys has v keys, its
// batch v shards). INVALID_ARGUMENT unless 1 <= n <= v and v divides the batch.
absl::StatusOr<std::vector<WorkerShare>> ShareStep(const StepPlan& plan, int n, int v);

// The host's means over the V logical replicas (the seed program's average of the local
// losses with V devices): summed in replica order, divided by V.
struct ReplicaMeans {
  float loss = 0;
  float accuracy = 0;
  std::vector<float> losses;  // the V replica losses, in replica order
};
// `got[r]` is worker r's answer, its replica_losses those of RangeOf(r, n, v).
// DATA_LOSS naming the rank when a worker answered for a different number of replicas.
absl::StatusOr<ReplicaMeans> MeanOverReplicas(const std::vector<StepResult>& got, int v);

// The rank of n that computes replica p of v (RangeOf's inverse).
int OwnerOf(int p, int n, int v);

// An evaluation over the test split in v parts, one per logical replica: part p is
// [begin, end) below, evaluated by the worker holding replica p; the parts' sums are added
// in part order, so the result does not depend on the workers.
struct EvalPart {
  int64_t begin = 0;
  int64_t end = 0;
};
EvalPart EvalPartOf(int64_t num_test, int part, int v);
EvalSums AddInOrder(const std::vector<EvalSums>& parts);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOBS_LOGICAL_DISPATCH_H_
