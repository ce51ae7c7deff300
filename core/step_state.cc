// StepExecutor's train state as bytes (StateBytes's layout: params, each optimizer slot,
// batch_stats), read and written in pieces, its checksum, and whole TrainStates. The
// step itself: step.cc.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/step.h"

namespace lockstep {

uint64_t StepExecutor::state_bytes() const {
  return (uint64_t{model_.layout().total()} * (1 + slots_.size()) + stats_count()) * sizeof(float);
}

absl::Status StepExecutor::ForStateRange(
    uint64_t offset, uint64_t size,
    const std::function<absl::Status(float*, uint64_t, uint64_t, uint64_t)>& f) {
  if (offset > state_bytes() || size > state_bytes() - offset) {
    return absl::InvalidArgumentError(absl::StrCat("state bytes [", offset, ", ", offset + size,
                                                   ") are outside the ", state_bytes(),
                                                   "-byte train state"));
  }
  const uint64_t per_buffer = uint64_t{model_.layout().total()} * sizeof(float);
  const uint64_t stats_at = per_buffer * (1 + slots_.size());
  for (uint64_t done = 0; done < size;) {
    const uint64_t at = offset + done;
    const bool stats = at >= stats_at;  // the batch_stats, after the params and slots
    const uint64_t i = stats ? 0 : at / per_buffer, in = stats ? at - stats_at : at % per_buffer;
    const uint64_t n =
        std::min(size - done, (stats ? stats_count() * sizeof(float) : per_buffer) - in);
    float* buffer = stats ? stats_.as() : (i == 0 ? params_.as() : slots_[i - 1].as());
    RETURN_IF_ERROR(f(buffer, in, done, n));
    done += n;
  }
  return absl::OkStatus();
}

absl::Status StepExecutor::WriteState(uint64_t offset, std::string_view bytes) {
  return ForStateRange(
      offset, bytes.size(), [&](float* buf, uint64_t in, uint64_t from, uint64_t n) {
        return backend_->CopyToDevice(reinterpret_cast<char*>(buf) + in, bytes.data() + from, n);
      });
}

absl::Status StepExecutor::ReadState(uint64_t offset, std::span<char> out) {
  RETURN_IF_ERROR(
      ForStateRange(offset, out.size(), [&](float* buf, uint64_t in, uint64_t to, uint64_t n) {
        return backend_->CopyToHost(out.data() + to, reinterpret_cast<char*>(buf) + in, n);
      }));
  return backend_->Synchronize();
}

absl::StatusOr<uint64_t> StepExecutor::ParamChecksum() {
  const size_t n = model_.layout().total(), stats = stats_count();
  host_params_.resize(n + stats);
  char* host = reinterpret_cast<char*>(host_params_.data());
  RETURN_IF_ERROR(backend_->CopyToHost(host, params_.as(), n * sizeof(float)));
  if (stats > 0) {
    RETURN_IF_ERROR(
        backend_->CopyToHost(host + n * sizeof(float), stats_.as(), stats * sizeof(float)));
  }
  RETURN_IF_ERROR(backend_->Synchronize());
  return ::lockstep::ParamChecksum({host_params_.data(), n}, {host_params_.data() + n, stats});
}

absl::Status StepExecutor::SetState(const TrainState& state) {
  const size_t n = model_.layout().total();
  if (state.params.size() != n || state.slots.size() != slots_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("train state has ", state.params.size(), " params and ", state.slots.size(),
                     " optimizer slots; the model needs ", n, " and ", slots_.size()));
  }
  for (const std::vector<float>& slot : state.slots) {
    if (slot.size() != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("an optimizer slot has ", slot.size(), " values, not ", n));
    }
  }
  if (state.batch_stats.size() != stats_count()) {
    return absl::InvalidArgumentError(absl::StrCat("train state has ", state.batch_stats.size(),
                                                   " batch_stats values; the model needs ",
                                                   stats_count()));
  }
  const std::string bytes = StateBytes(state);
  RETURN_IF_ERROR(WriteState(0, bytes));
  step_ = state.step;
  return backend_->Synchronize();
}

absl::StatusOr<TrainState> StepExecutor::GetState() {
  std::string bytes(state_bytes(), '\0');
  RETURN_IF_ERROR(ReadState(0, {bytes.data(), bytes.size()}));
  return StateFromBytes(
      bytes, {step_, model_.layout().total(), static_cast<uint32_t>(slots_.size()), stats_count()});
}

// What GetWorkspace allocates, buffer for buffer: keep the two in step. A conv's scratch is
// counted as the default convolutions' (the patches): an upper bound for backends that

}  // namespace lockstep
