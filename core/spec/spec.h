// JobSpec files and validation. A spec file is YAML or JSON, parsed into the JobSpec
// protobuf message by protobuf's JSON mapping (the .proto is the schema): unknown fields
// and values of the wrong type are errors naming the field. Validate() then checks
// meaning (kinds, ranges, divisibility) and fills defaults.
#ifndef LOCKSTEP_CORE_SPEC_SPEC_H_
#define LOCKSTEP_CORE_SPEC_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/data/data_roots.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/rng/threefry.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

// Parses YAML (a superset of JSON) text. `source` names the text in errors.
absl::StatusOr<v1::JobSpec> ParseSpec(const std::string& text, const std::string& source);
// Reads and parses a file; NOT_FOUND naming the path when it cannot be read.
absl::StatusOr<v1::JobSpec> LoadSpecFile(const std::string& path);

// Limits a service places on specs (`lockstep train` uses the defaults).
struct SpecLimits {
  uint32_t max_workers = 64;
  uint64_t max_params = 100'000'000;
  uint32_t max_global_batch = 1 << 20;
  // checkpoint_path and resume_from name files in the coordinator's checkpoint folder,
  // tensorboard_dir a folder in the job's TensorBoard folder: relative, never leaving it. Off for
  // `lockstep train` (the user's own files).
  bool files_in_checkpoint_dir = true;
  // dataset.path (dataset.train_path and dataset.test_path) must lie inside these, as
  // written (DataRoots::CheckLexically: the workers check again, resolved); none: any path.
  DataRoots data_roots;
};

// Checks a spec and returns it with defaults filled in (workers 1, rng_impl, dataset
// format and path, eval cadence...). INVALID_ARGUMENT naming the offending field.
absl::StatusOr<v1::JobSpec> Validate(const v1::JobSpec& spec, const SpecLimits& limits = {});

// The dataset Debian installs (dataset-fashion-mnist) is known without reading it: 28x28x1
// images in 10 classes. For a validated spec that trains on it, INVALID_ARGUMENT naming
// model.input_shape or the last layer's field when the model cannot take them; OK for any
// other dataset (the workers check those as they read them). The coordinator calls it at
// submit, so that such a job is refused before it takes workers; Validate does not (tests
// validate golden specs whose data they supply themselves).
absl::Status CheckModelFitsInstalledDataset(const v1::JobSpec& spec);

// What a spec trains: built once per process from the spec (the coordinator's job
// loop and each replica).
struct TrainSetup {
  Model model;
  Optimizer optimizer;
  rng::Impl impl;
};
absl::StatusOr<TrainSetup> SetupFromSpec(const v1::JobSpec& spec);

// allreduce.bucket_kib when the spec leaves it unset (Validate fills it in).
inline constexpr uint32_t kDefaultBucketKib = 64;
// The gradient bucket size in bytes a replica all-reduces with (0: no overlap).
inline size_t AllReduceBucketBytes(const v1::JobSpec& spec) {
  const uint32_t kib =
      spec.allreduce().has_bucket_kib() ? spec.allreduce().bucket_kib() : kDefaultBucketKib;
  return size_t{kib} * 1024;
}

// Each of `world_size` replicas' share of the global batch (world_size: LogicalWorld for
// the job's shards); INVALID_ARGUMENT naming global_batch_size unless world_size divides
// it. The one divisibility check.
absl::StatusOr<int> LocalBatch(const v1::JobSpec& spec, int world_size);

// The job's V: `replicas`, or the workers (V = N) without it. B is split into this many
// shards, and the step's dropout keys are split(step_key, V).
inline int LogicalWorld(const v1::JobSpec& spec) {
  return static_cast<int>(spec.replicas() > 0 ? spec.replicas() : spec.workers());
}
// The fewest workers the job runs on: min_workers, else workers.
inline int MinWorkers(const v1::JobSpec& spec) {
  return static_cast<int>(spec.min_workers() > 0 ? spec.min_workers() : spec.workers());
}

// Total steps the spec asks for given the training split's size.
int64_t TotalSteps(const v1::JobSpec& spec, int64_t num_train);

// Whether the spec's eval cadence asks for an evaluation once `done` steps are done.
bool EvalDue(const v1::EvalSpec& eval, int64_t done, int64_t steps_per_epoch);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_SPEC_SPEC_H_
