// TrainState on the host: flax.training.train_state.TrainState's step, params and
// optimizer state, each tensor tree flattened into one array in ParamLayout order.
#ifndef LOCKSTEP_CORE_TRAIN_STATE_H_
#define LOCKSTEP_CORE_TRAIN_STATE_H_

#include <cstdint>
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

  // TrainState.create(params, tx): step 0, zero optimizer state.
  static TrainState Create(std::vector<float> params, const Optimizer& optimizer) {
    TrainState s;
    s.slots.assign(optimizer.slots().size(), std::vector<float>(params.size(), 0.0f));
    s.params = std::move(params);
    return s;
  }
};

// The bytes a TrainState travels as (Prepare, FetchState): the params, then each slot,
// as float32 in host order.
std::string StateBytes(const TrainState& state);
// The inverse. INVALID_ARGUMENT naming both sizes unless `bytes` holds exactly
// param_count * (1 + slot_count) floats.
absl::StatusOr<TrainState> StateFromBytes(std::string_view bytes, int64_t step,
                                          uint64_t param_count, uint32_t slot_count);

// FNV-1a over the bytes of the params: replicas must agree bit for bit.
uint64_t ParamChecksum(const std::vector<float>& params);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_TRAIN_STATE_H_
