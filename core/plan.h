// TrainingPlan: Lockstep's RNG plan for a job (reference §7), the single source of
// every random choice a job makes: the init key, each epoch's data order and each step's
// per-worker dropout keys and sample indices. The coordinator's job loop owns one (also in
// `lockstep train`, N = 1); workers receive its output in the step command, so any step
// can be replayed.
#ifndef LOCKSTEP_CORE_PLAN_H_
#define LOCKSTEP_CORE_PLAN_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/rng/threefry.h"

namespace lockstep {

// ShardBatch: global batch of B rows into N local batches of B/N, row-major (worker r
// gets rows [r*B/N, (r+1)*B/N)). INVALID_ARGUMENT naming both numbers if B % N != 0.
absl::StatusOr<std::vector<std::span<const int32_t>>> ShardBatch(std::span<const int32_t> global,
                                                                 int num_shards);

// Logical replicas (docs/elastic.md): worker r of n computes the contiguous range
// [first, first + count) of the job's v replicas; the n ranges are balanced (their sizes
// differ by at most one) and cover [0, v) in rank order. Needs 1 <= n <= v.
struct ReplicaRange {
  int first = 0;
  int count = 0;
};
ReplicaRange RangeOf(int rank, int n, int v);

struct StepPlan {
  int64_t step = 0;  // global step, from 0
  int64_t epoch = 0;
  std::vector<rng::Key> keys;    // per worker: its 'dropout' stream root
  std::vector<int32_t> indices;  // the global batch; shard with ShardBatch
  // The epoch's data key, fold_in(input_rng, 1) for the input_rng that drew the epoch's
  // permutation: example i's random preprocessing draws from fold_in(data_key, i)
  // (docs/datasets.md), so an example gets the same crop wherever it is computed.
  rng::Key data_key;
};

class TrainingPlan {
 public:
  // num_train: training examples; B % N must be 0 and B <= num_train (checked by the
  // spec's validation).
  TrainingPlan(int64_t seed, int64_t dropout_seed, rng::Impl impl, int64_t num_train,
               int global_batch, int num_workers);

  // The key model.init receives: split(PRNGKey(seed))[1].
  static rng::Key InitKey(int64_t seed, rng::Impl impl);
  rng::Key init_key() const { return init_key_; }
  // The chain's current keys (saved in checkpoints): the data-order key and main_key.
  rng::Key data_key() const { return data_key_; }
  rng::Key main_key() const { return main_key_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }

  // The next step's plan; the first call returns step 0.
  StepPlan Next();

 private:
  rng::Impl impl_;
  int64_t num_train_;
  int global_batch_, num_workers_;
  int64_t steps_per_epoch_;
  rng::Key data_key_, init_key_, main_key_;
  int64_t next_step_ = 0;
  std::vector<int32_t> order_;
  rng::Key epoch_data_key_;  // the current epoch's StepPlan::data_key
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_PLAN_H_
