// TrainState on the host: flax.training.train_state.TrainState's step, params and
// optimizer state, each tensor tree flattened into one array in ParamLayout order, and the
// model's `batch_stats` collection (BatchNorm's running averages; empty without them).
#ifndef LOCKSTEP_CORE_TRAIN_STATE_H_
#define LOCKSTEP_CORE_TRAIN_STATE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/optimizer.h"

namespace lockstep {

struct TrainState {
  int64_t step = 0;  // updates applied (= optax's count)
  std::vector<float> params;
  std::vector<std::vector<float>> slots;  // Optimizer::slots() order, each like params
  std::vector<float> batch_stats;         // Model::stats_layout() order

  // TrainState.create(params, tx) with the model's batch_stats (Model::InitStats): step 0,
  // zero optimizer state.
  static TrainState Create(std::vector<float> params, const Optimizer& optimizer,
                           std::vector<float> batch_stats = {}) {
    TrainState s;
    s.slots.assign(optimizer.slots().size(), std::vector<float>(params.size(), 0.0f));
    s.params = std::move(params);
    s.batch_stats = std::move(batch_stats);
    return s;
  }
};

// What describes a TrainState's bytes in transit (Prepare, FetchState): the params, then
// each slot, param_count float32 each, then the stats_count batch_stats, in host order.
struct StateHeader {
  // More optimizer slots than any optimizer has (adam's are two).
  static constexpr uint32_t kMaxSlots = 16;

  int64_t step = 0;
  uint64_t param_count = 0;
  uint32_t slot_count = 0;
  uint64_t stats_count = 0;

  // The byte count; INVALID_ARGUMENT when it would exceed `max_bytes` (or overflow), or
  // slot_count exceeds kMaxSlots.
  absl::StatusOr<uint64_t> Bytes(uint64_t max_bytes = uint64_t{1} << 40) const;
};

std::string StateBytes(const TrainState& state);
// The bytes of a fresh TrainState (step 0, zero optimizer slots) without building it.
std::string InitialStateBytes(std::span<const float> params, uint32_t slot_count,
                              std::span<const float> batch_stats = {});
// The inverse of StateBytes. INVALID_ARGUMENT naming both sizes unless `bytes` holds
// exactly what `header` describes.
absl::StatusOr<TrainState> StateFromBytes(std::string_view bytes, const StateHeader& header);

// Builds a TrainState from its bytes as they arrive in chunks, without a second copy.
// Memory grows with the bytes that arrive, not with what the header announces: a header
// from a faulty peer cannot make it allocate terabytes.
class StateAssembler {
 public:
  // INVALID_ARGUMENT when the header describes more than `max_bytes`.
  static absl::StatusOr<StateAssembler> Create(const StateHeader& header,
                                               uint64_t max_bytes = uint64_t{1} << 40);
  // DATA_LOSS when the chunk runs past the announced size.
  absl::Status Append(std::string_view chunk);
  // DATA_LOSS unless every byte arrived.
  absl::StatusOr<TrainState> Finish() &&;

 private:
  StateAssembler() = default;
  TrainState state_;  // each tensor as long as what has arrived of it
  uint64_t param_count_ = 0, stats_count_ = 0, total_ = 0, received_ = 0;
};

// FNV-1a over the bytes of the params, continued over those of the batch_stats (none:
// the params' alone): replicas must agree bit for bit.
uint64_t ParamChecksum(std::span<const float> params, std::span<const float> batch_stats = {});

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_TRAIN_STATE_H_
