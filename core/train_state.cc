#include "core/train_state.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace lockstep {

uint64_t ParamChecksum(const std::vector<float>& params) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(params.data());
  for (size_t i = 0; i < params.size() * sizeof(float); ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::string StateBytes(const TrainState& state) {
  std::string bytes;
  bytes.reserve(state.params.size() * (1 + state.slots.size()) * sizeof(float));
  auto append = [&](const std::vector<float>& v) {
    bytes.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  };
  append(state.params);
  for (const auto& slot : state.slots) append(slot);
  return bytes;
}

absl::StatusOr<TrainState> StateFromBytes(std::string_view bytes, int64_t step,
                                          uint64_t param_count, uint32_t slot_count) {
  const uint64_t tensors = 1 + uint64_t{slot_count};
  if (param_count > bytes.size() || tensors > bytes.size() ||
      bytes.size() != param_count * tensors * sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat("train state has ", bytes.size(), " bytes; ", param_count, " params and ",
                     slot_count, " optimizer slots need ", param_count * tensors * sizeof(float)));
  }
  auto take = [&](uint64_t i) {
    std::vector<float> v(param_count);
    std::memcpy(v.data(), bytes.data() + i * param_count * sizeof(float),
                param_count * sizeof(float));
    return v;
  };
  TrainState state;
  state.step = step;
  state.params = take(0);
  for (uint32_t s = 0; s < slot_count; ++s) state.slots.push_back(take(1 + s));
  return state;
}

}  // namespace lockstep
