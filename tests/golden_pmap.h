// A golden file's spec trained on two replicas, as pmap over 2 devices runs it: two
// threads, each a StepExecutor on its own CPU backend, all-reducing over Gloo on loopback.
// For the tests that compare such a run with a file make_golden.py wrote under pmap
// (golden_batchnorm_test, golden_resnet_test, golden_random_test). Library
// lockstep_golden_pmap.
#ifndef LOCKSTEP_TESTS_GOLDEN_PMAP_H_
#define LOCKSTEP_TESTS_GOLDEN_PMAP_H_

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "core/collective.h"
#include "core/data/dataset.h"
#include "core/step.h"
#include "core/train_state.h"
#include "tests/golden.h"

namespace lockstep::testing {

// One replica of the run: its final state, each step's local loss, and its evaluation of
// the whole data (in batches of 24) at the end.
struct ReplicaRun {
  absl::Status status;
  TrainState state;
  std::vector<float> losses;
  EvalMetrics eval;
  // Kept until both ranks are done (see ~GlooCollective); a rank that fails drops its own
  // at once, so that its peer fails at once too.
  std::unique_ptr<Collective> collective;
};

// g.spec's steps on 2 replicas from the plan's initial state, 1 thread each; with
// `bucket_bytes`, the gradients all-reduced in buckets of that size overlapping backward.
std::array<ReplicaRun, 2> RunTwoReplicas(const SpecGolden& g, const Dataset& data,
                                         std::optional<size_t> bucket_bytes = std::nullopt);

// The losses (the replicas' mean per step), params and batch_stats of a final state
// within 1e-5 of the file's train.losses, train.params.* and train.stats.*.
void ExpectMatchesPmap(const SpecGolden& g, const std::vector<float>& losses,
                       const TrainState& state);

// RunTwoReplicas: both ranks succeed with the same state, which matches the file
// (ExpectMatchesPmap), as does rank 0's evaluation (eval.loss 1e-5, eval.accuracy).
void ExpectTwoReplicasMatchPmap(const SpecGolden& g, const Dataset& data,
                                std::optional<size_t> bucket_bytes = std::nullopt);

// The same steps as 2 logical replicas of one executor (exact sums): ExpectMatchesPmap.
void ExpectTwoLogicalReplicasMatchPmap(const SpecGolden& g, const Dataset& data);

}  // namespace lockstep::testing

#endif  // LOCKSTEP_TESTS_GOLDEN_PMAP_H_
