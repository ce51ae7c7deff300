// TrainState on the host: the step, params and optimizer state of Flax's TrainState, and the
// model's batch_stats. Contract: train_state.h.
#include "core/train_state.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace lockstep {

uint64_t ParamChecksum(std::span<const float> params, std::span<const float> batch_stats) {
  uint64_t h = 1469598103934665603ull;
  for (std::span<const float> t : {params, batch_stats}) {
    const auto* p = reinterpret_cast<const unsigned char*>(t.data());
    for (size_t i = 0; i < t.size() * sizeof(float); ++i) {
      h ^= p[i];
      h *= 1099511628211ull;
    }
  }
  return h;
}

absl::StatusOr<uint64_t> StateHeader::Bytes(uint64_t max_bytes) const {
  if (slot_count > kMaxSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("train state has ", slot_count, " optimizer slots; at most ", kMaxSlots));
  }
  const uint64_t tensors = 1 + uint64_t{slot_count}, max_floats = max_bytes / sizeof(float);
  if (param_count > max_floats / tensors || stats_count > max_floats - param_count * tensors) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train state of ", param_count, " params, ", slot_count, " optimizer slots and ",
        stats_count, " batch stats exceeds the limit of ", max_bytes, " bytes"));
  }
  return (param_count * tensors + stats_count) * sizeof(float);
}

std::string StateBytes(const TrainState& state) {
  std::string bytes;
  bytes.reserve((state.params.size() * (1 + state.slots.size()) + state.batch_stats.size()) *
                sizeof(float));
  auto append = [&](const std::vector<float>& v) {
    bytes.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  };
  append(state.params);
  for (const auto& slot : state.slots) append(slot);
  append(state.batch_stats);
  return bytes;
}

std::string InitialStateBytes(std::span<const float> params, uint32_t slot_count,
                              std::span<const float> batch_stats) {
  const size_t n = params.size() * sizeof(float), tensors = n * (1 + size_t{slot_count});
  std::string bytes(tensors + batch_stats.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), params.data(), n);
  if (!batch_stats.empty()) {
    std::memcpy(bytes.data() + tensors, batch_stats.data(), batch_stats.size() * sizeof(float));
  }
  return bytes;
}

absl::StatusOr<TrainState> StateFromBytes(std::string_view bytes, const StateHeader& header) {
  absl::StatusOr<uint64_t> want = header.Bytes();
  if (!want.ok() || *want != bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train state has ", bytes.size(), " bytes; ", header.param_count, " params, ",
        header.slot_count, " optimizer slots and ", header.stats_count, " batch stats need ",
        want.ok() ? absl::StrCat(*want) : std::string(want.status().message())));
  }
  absl::StatusOr<StateAssembler> a = StateAssembler::Create(header);
  if (!a.ok()) return a.status();
  if (absl::Status st = a->Append(bytes); !st.ok()) return st;
  return std::move(*a).Finish();
}

absl::StatusOr<StateAssembler> StateAssembler::Create(const StateHeader& header,
                                                      uint64_t max_bytes) {
  absl::StatusOr<uint64_t> total = header.Bytes(max_bytes);
  if (!total.ok()) return total.status();
  StateAssembler a;
  a.param_count_ = header.param_count;
  a.stats_count_ = header.stats_count;
  a.total_ = *total;
  a.state_.step = header.step;
  a.state_.slots.resize(header.slot_count);
  return a;
}

absl::Status StateAssembler::Append(std::string_view chunk) {
  if (chunk.size() > total_ - received_) {
    return absl::DataLossError(absl::StrCat("train state: ", received_ + chunk.size(),
                                            " bytes arrived; the header announced ", total_));
  }
  const uint64_t per_tensor = param_count_ * sizeof(float);
  const uint64_t stats_at = per_tensor * (1 + state_.slots.size());
  for (uint64_t done = 0; done < chunk.size();) {
    const uint64_t at = received_ + done;
    // The tensor `at` falls in: params, a slot, or the batch_stats after them all.
    const bool stats = at >= stats_at;
    const uint64_t i = stats ? 0 : at / per_tensor, in = stats ? at - stats_at : at % per_tensor;
    const uint64_t size = stats ? stats_count_ * sizeof(float) : per_tensor;
    const uint64_t n = std::min<uint64_t>(chunk.size() - done, size - in);
    std::vector<float>& v =
        stats ? state_.batch_stats : (i == 0 ? state_.params : state_.slots[i - 1]);
    // Grow to what has arrived, doubling (as push_back would) but never past the tensor.
    const size_t floats = (in + n + sizeof(float) - 1) / sizeof(float);
    if (v.capacity() < floats) {
      v.reserve(std::min<size_t>(size / sizeof(float), std::max(floats, 2 * v.capacity())));
    }
    if (v.size() < floats) v.resize(floats);
    std::memcpy(reinterpret_cast<char*>(v.data()) + in, chunk.data() + done, n);
    done += n;
  }
  received_ += chunk.size();
  return absl::OkStatus();
}

absl::StatusOr<TrainState> StateAssembler::Finish() && {
  if (received_ != total_) {
    return absl::DataLossError(
        absl::StrCat("train state: ", received_, " bytes arrived; the header announced ", total_));
  }
  return std::move(state_);
}

}  // namespace lockstep
