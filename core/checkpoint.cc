// Checkpoints: a TrainState as a safetensors file with Flax-style flattened names, read back
// checked. Contract: checkpoint.h.
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

constexpr char kFormat[] = "lockstep.train_state.v1";
// optax's state.count (the updates done): the step, beside it in the metadata.
constexpr char kCount[] = "opt_state.count";

// The tensors of `layout` under `prefix` ("params", "opt_state.mu", "batch_stats"; "" for
// bare names) into `dst`.
absl::Status Load(const SafeTensors& st, const std::string& path, const ParamLayout& layout,
                  const std::string& prefix, std::vector<float>& dst) {
  dst.resize(layout.total());
  for (const ParamEntry& e : layout.entries()) {
    std::string name = FlaxName(prefix, e);
    if (prefix.empty()) name = name.substr(1);
    ASSIGN_OR_RETURN(std::vector<float> v, st.F32(name));  // NOT_FOUND naming file and tensor
    if (v.size() != e.size) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", name, " has ", v.size(), " values, expected ", e.size));
    }
    std::copy(v.begin(), v.end(), dst.begin() + e.offset);
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainState> FromTensors(const SafeTensors& st, const std::string& path,
                                       const Model& model, const Optimizer& optimizer) {
  TrainState state;
  RETURN_IF_ERROR(Load(st, path, model.layout(), "params", state.params));
  state.slots.resize(optimizer.slots().size());
  for (size_t s = 0; s < optimizer.slots().size(); ++s) {
    RETURN_IF_ERROR(
        Load(st, path, model.layout(), "opt_state." + optimizer.slots()[s], state.slots[s]));
  }
  RETURN_IF_ERROR(Load(st, path, model.stats_layout(), "batch_stats", state.batch_stats));
  auto it = st.metadata().find("step");
  if (it != st.metadata().end() && !absl::SimpleAtoi(it->second, &state.step)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": step \"", it->second, "\""));
  }
  // Files written before the count was kept have none.
  if (st.tensors().count(kCount) > 0) {
    ASSIGN_OR_RETURN(const std::vector<int64_t> count, st.I64(kCount));
    if (count.size() != 1 || count[0] != state.step) {
      return absl::DataLossError(absl::StrCat(path, ": ", kCount, " is not the step ", state.step));
    }
  }
  return state;
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
  for (const ParamEntry& e : model.stats_layout().entries()) {
    st.AddF32(FlaxName("batch_stats", e), e.shape,
              std::span<const float>(state.batch_stats.data() + e.offset, e.size));
  }
  const int64_t count = state.step;
  st.Add(kCount, "I64", {}, &count, sizeof(count));
  st.metadata() = extra;
  st.metadata()["step"] = std::to_string(state.step);
  st.metadata()["format"] = kFormat;
  return st.Write(path);
}

absl::StatusOr<TrainState> ReadCheckpoint(const std::string& path, const Model& model,
                                          const Optimizer& optimizer,
                                          std::map<std::string, std::string>* metadata,
                                          bool* digested) {
  ASSIGN_OR_RETURN(SafeTensors st, SafeTensors::Read(path));
  ASSIGN_OR_RETURN(TrainState state, FromTensors(st, path, model, optimizer));
  if (metadata != nullptr) *metadata = st.metadata();
  if (digested != nullptr) *digested = st.digested();
  return state;
}

absl::StatusOr<StartingPoint> ReadStartingPoint(const std::string& path, const Model& model,
                                                const Optimizer& optimizer) {
  ASSIGN_OR_RETURN(SafeTensors st, SafeTensors::Read(path));
  StartingPoint start;
  start.metadata = st.metadata();
  start.digested = st.digested();
  auto format = start.metadata.find("format");
  if (format != start.metadata.end() && format->second == kFormat) {
    ASSIGN_OR_RETURN(start.state, FromTensors(st, path, model, optimizer));
    return start;
  }
  // Params only: under "params." or bare.
  std::vector<float> params;
  const bool prefixed =
      !model.layout().entries().empty() &&
      st.tensors().count(FlaxName("params", model.layout().entries().front())) > 0;
  RETURN_IF_ERROR(Load(st, path, model.layout(), prefixed ? "params" : "", params));
  // The file's batch_stats where it has them (flatten_dict of the whole variables),
  // otherwise the fresh running averages of init.
  std::vector<float> stats = model.InitStats();
  const auto& stats_entries = model.stats_layout().entries();
  if (!stats_entries.empty() && st.tensors().count(FlaxName("batch_stats", stats_entries[0]))) {
    RETURN_IF_ERROR(Load(st, path, model.stats_layout(), "batch_stats", stats));
  }
  start.state = TrainState::Create(std::move(params), optimizer, std::move(stats));
  start.params_only = true;
  return start;
}

}  // namespace lockstep
