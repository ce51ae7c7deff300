#include "services/coordinator/snapshot_store.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/checkpoint.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

constexpr char kPrefix[] = "step-";
constexpr char kSuffix[] = ".safetensors";

}  // namespace

std::string SnapshotStore::PathOf(int64_t step) const {
  return absl::StrFormat("%s/%s%012d%s", dir_, kPrefix, step, kSuffix);
}

absl::Status SnapshotStore::Write(const Model& model, const Optimizer& optimizer,
                                  const TrainState& state,
                                  const std::map<std::string, std::string>& metadata) {
  if (!enabled()) return absl::OkStatus();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(dir_, ": ", ec.message()));
  RETURN_IF_ERROR(WriteCheckpoint(PathOf(state.step), model, optimizer, state, metadata));
  std::vector<int64_t> steps = Steps();
  for (size_t i = 0; i + keep_ < steps.size(); ++i) fs::remove(PathOf(steps[i]), ec);
  return absl::OkStatus();
}

std::vector<int64_t> SnapshotStore::Steps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!enabled()) return steps;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || e.path().extension() != kSuffix) continue;
    int64_t step;
    const std::string digits = name.substr(sizeof(kPrefix) - 1, 12);
    if (absl::SimpleAtoi(digits, &step)) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<std::optional<Snapshot>> SnapshotStore::Latest(const Model& model,
                                                              const Optimizer& optimizer) const {
  const std::vector<int64_t> steps = Steps();
  if (steps.empty()) return std::optional<Snapshot>();
  Snapshot s;
  absl::StatusOr<TrainState> state =
      ReadCheckpoint(PathOf(steps.back()), model, optimizer, &s.metadata);
  if (!state.ok()) return absl::DataLossError(state.status().message());
  s.state = std::move(state).value();
  return s;
}

void SnapshotStore::Clear() {
  if (!enabled()) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

}  // namespace lockstep
