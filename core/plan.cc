// TrainingPlan: Lockstep's RNG plan for a job (reference §7), the single source of every random
// choice a job makes: the init key, each epoch's data order and each step's per-worker dropout keys
// and sample indices. Contract: plan.h.
#include "core/plan.h"

#include "absl/strings/str_cat.h"
#include "core/rng/random.h"

namespace lockstep {

absl::StatusOr<std::vector<std::span<const int32_t>>> ShardBatch(std::span<const int32_t> global,
                                                                 int num_shards) {
  if (num_shards <= 0 || global.size() % num_shards != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "global batch size ", global.size(), " is not divisible by ", num_shards, " workers"));
  }
  const size_t local = global.size() / num_shards;
  std::vector<std::span<const int32_t>> shards;
  for (int r = 0; r < num_shards; ++r) shards.push_back(global.subspan(r * local, local));
  return shards;
}

ReplicaRange RangeOf(int rank, int n, int v) {
  const int first = static_cast<int>(int64_t{rank} * v / n);
  const int end = static_cast<int>(int64_t{rank + 1} * v / n);
  return {first, end - first};
}

TrainingPlan::TrainingPlan(int64_t seed, int64_t dropout_seed, rng::Impl impl, int64_t num_train,
                           int global_batch, int num_workers)
    : impl_(impl),
      num_train_(num_train),
      global_batch_(global_batch),
      num_workers_(num_workers),
      steps_per_epoch_(num_train / global_batch) {
  // rng = PRNGKey(seed); rng, init_rng = split(rng)   (the Flax MNIST example)
  std::vector<rng::Key> k = rng::Split(rng::PRNGKey(seed), 2, impl_);
  data_key_ = k[0];
  init_key_ = k[1];
  main_key_ = rng::PRNGKey(dropout_seed);  // the seed program's main_key
}

rng::Key TrainingPlan::InitKey(int64_t seed, rng::Impl impl) {
  return rng::Split(rng::PRNGKey(seed), 2, impl)[1];
}

StepPlan TrainingPlan::Next() {
  StepPlan p;
  p.step = next_step_++;
  p.epoch = p.step / steps_per_epoch_;
  const int64_t s = p.step % steps_per_epoch_;
  if (s == 0) {
    // rng, input_rng = split(rng); perms = permutation(input_rng, num_train)
    std::vector<rng::Key> k = rng::Split(data_key_, 2, impl_);
    data_key_ = k[0];
    order_ = rng::Permutation(k[1], impl_, num_train_);
  }
  p.indices.assign(order_.begin() + s * global_batch_, order_.begin() + (s + 1) * global_batch_);
  // step_key, main_key = split(main_key); keys = split(step_key, N)
  std::vector<rng::Key> k = rng::Split(main_key_, 2, impl_);
  main_key_ = k[1];
  p.keys = rng::Split(k[0], num_workers_, impl_);
  return p;
}

}  // namespace lockstep
