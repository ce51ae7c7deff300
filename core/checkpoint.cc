#include "core/checkpoint.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/io/safetensors.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

std::string FlaxName(const std::string& prefix, const ParamEntry& e) {
  return absl::StrCat(prefix, ".", absl::StrReplaceAll(e.name, {{"/", "."}}));
}

}  // namespace

absl::Status WriteCheckpoint(const std::string& path, const Model& model,
                             const Optimizer& optimizer, const TrainState& state,
                             const std::map<std::string, std::string>& extra) {
  SafeTensors st;
  const auto& entries = model.layout().entries();
  for (const ParamEntry& e : entries) {
    st.AddF32(FlaxName("params", e), e.shape,
              std::span<const float>(state.params.data() + e.offset, e.size));
    for (size_t s = 0; s < optimizer.slots().size(); ++s) {
      st.AddF32(FlaxName("opt_state." + optimizer.slots()[s], e), e.shape,
                std::span<const float>(state.slots[s].data() + e.offset, e.size));
    }
  }
  st.metadata() = extra;
  st.metadata()["step"] = std::to_string(state.step);
  st.metadata()["format"] = "lockstep.train_state.v1";
  return st.Write(path);
}

absl::StatusOr<TrainState> ReadCheckpoint(const std::string& path, const Model& model,
                                          const Optimizer& optimizer,
                                          std::map<std::string, std::string>* metadata) {
  ASSIGN_OR_RETURN(SafeTensors st, SafeTensors::Read(path));
  TrainState state;
  const size_t n = model.layout().total();
  state.params.resize(n);
  state.slots.assign(optimizer.slots().size(), std::vector<float>(n));
  auto load = [&](const std::string& prefix, std::vector<float>& dst) -> absl::Status {
    for (const ParamEntry& e : model.layout().entries()) {
      ASSIGN_OR_RETURN(std::vector<float> v, st.F32(FlaxName(prefix, e)));
      if (v.size() != e.size) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": ", FlaxName(prefix, e), " has ",
                                                       v.size(), " values, expected ", e.size));
      }
      std::copy(v.begin(), v.end(), dst.begin() + e.offset);
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(load("params", state.params));
  for (size_t s = 0; s < optimizer.slots().size(); ++s) {
    RETURN_IF_ERROR(load("opt_state." + optimizer.slots()[s], state.slots[s]));
  }
  auto it = st.metadata().find("step");
  if (it != st.metadata().end() && !absl::SimpleAtoi(it->second, &state.step)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": step \"", it->second, "\""));
  }
  if (metadata != nullptr) *metadata = st.metadata();
  return state;
}

}  // namespace lockstep
