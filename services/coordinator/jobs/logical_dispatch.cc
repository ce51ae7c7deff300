// The coordinator's side of logical replicas (JobSpec.replicas, docs/elastic.md): which rows and
// dropout keys of a step each worker computes, and how the V replicas' losses and a split
// evaluation come back together. Contract: logical_dispatch.h.
#include "services/coordinator/jobs/logical_dispatch.h"

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::StatusOr<std::vector<WorkerShare>> ShareStep(const StepPlan& plan, int n, int v) {
  if (n < 1 || n > v || static_cast<int>(plan.keys.size()) != v ||
      plan.indices.size() % static_cast<size_t>(v) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("a step of ", plan.indices.size(), " rows and ",
                                                   plan.keys.size(), " keys cannot go to ", n,
                                                   " workers of ", v, " logical replicas"));
  }
  const size_t rows = plan.indices.size() / v;
  const std::span<const int32_t> all(plan.indices);
  const std::span<const rng::Key> keys(plan.keys);
  std::vector<WorkerShare> out;
  for (int r = 0; r < n; ++r) {
    const ReplicaRange range = RangeOf(r, n, v);
    out.push_back({range, all.subspan(range.first * rows, range.count * rows),
                   keys.subspan(range.first, range.count)});
  }
  return out;
}

absl::StatusOr<ReplicaMeans> MeanOverReplicas(const std::vector<StepResult>& got, int v) {
  ReplicaMeans out;
  float loss_sum = 0, acc_sum = 0;
  const int n = static_cast<int>(got.size());
  for (int r = 0; r < n; ++r) {
    const ReplicaRange range = RangeOf(r, n, v);
    const StepResult& g = got[r];
    if (static_cast<int>(g.replica_losses.size()) != range.count ||
        g.replica_accuracies.size() != g.replica_losses.size()) {
      return absl::DataLossError(absl::StrCat("rank ", r, " answered for ", g.replica_losses.size(),
                                              " logical replicas, not ", range.count));
    }
    for (int j = 0; j < range.count; ++j) {
      loss_sum += g.replica_losses[j];
      acc_sum += g.replica_accuracies[j];
      out.losses.push_back(g.replica_losses[j]);
    }
  }
  out.loss = loss_sum / static_cast<float>(v);
  out.accuracy = acc_sum / static_cast<float>(v);
  return out;
}

int OwnerOf(int p, int n, int v) {
  int r = 0;
  while (r + 1 < n && RangeOf(r + 1, n, v).first <= p) ++r;
  return r;
}

EvalPart EvalPartOf(int64_t num_test, int part, int v) {
  return {num_test * part / v, num_test * (part + 1) / v};
}

EvalSums AddInOrder(const std::vector<EvalSums>& parts) {
  EvalSums sum;
  for (const EvalSums& p : parts) {
    sum.loss_sum += p.loss_sum;
    sum.correct += p.correct;
    sum.count += p.count;
  }
  return sum;
}

}  // namespace lockstep
