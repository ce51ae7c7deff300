// Checkpoints: a TrainState as a safetensors file with Flax-style flattened names
// ("params.Conv_0.kernel", "opt_state.mu.Conv_0.kernel", "batch_stats.BatchNorm_0.mean",
// and optax's count as "opt_state.count", an I64 scalar equal to the step), the step and
// RNG keys in its metadata, so that Python's safetensors loads it straight into a Flax
// params tree. Every file written carries digests of its header and of each tensor
// (core/io/safetensors_digest.h), checked by every read: a damaged file is DATA_LOSS
// naming the file and the tensor (or the header). Files without digests (written before
// Lockstep kept them, or by other tools) are read as they are; `digested` says which.
#ifndef LOCKSTEP_CORE_CHECKPOINT_H_
#define LOCKSTEP_CORE_CHECKPOINT_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/train_state.h"

namespace lockstep {

// `extra` is added to the metadata (spec, RNG keys, job id...).
absl::Status WriteCheckpoint(const std::string& path, const Model& model,
                             const Optimizer& optimizer, const TrainState& state,
                             const std::map<std::string, std::string>& extra);

// Reads a checkpoint written for `model` and `optimizer`, and its metadata and whether it
// had digests when asked; errors name the file and the missing, mis-shaped or damaged
// tensor (DATA_LOSS for a digest or an opt_state.count that does not match).
absl::StatusOr<TrainState> ReadCheckpoint(const std::string& path, const Model& model,
                                          const Optimizer& optimizer,
                                          std::map<std::string, std::string>* metadata = nullptr,
                                          bool* digested = nullptr);

// What a job can start from (`resume_from`): a Lockstep train state (its metadata's format
// is "lockstep.train_state.v1") to continue where it stopped, or a file of params only
// (Flax names, with or without the "params." prefix, as flatten_dict(params, sep=".")
// writes them) to fine-tune from, at step 0 with a fresh optimizer state (and the file's
// batch_stats.* where it has them, else those of init).
struct StartingPoint {
  TrainState state;
  bool params_only = false;
  bool digested = false;  // the file had digests (all matched)
  std::map<std::string, std::string> metadata;
};
absl::StatusOr<StartingPoint> ReadStartingPoint(const std::string& path, const Model& model,
                                                const Optimizer& optimizer);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_CHECKPOINT_H_
