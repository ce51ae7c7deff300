// The "bitwise witness" of a job: the params checksum at each snapshot it took, which the dashboard
// shows so that two runs of one spec can be compared at a glance (equal checksums at equal steps:
// the same bits). Contract: witness.h.
#include "services/coordinator/storage/witness.h"

#include <algorithm>
#include <filesystem>

#include "core/io/safetensors.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

// What a file's metadata says it holds (so that no other safetensors file is taken for one).
constexpr char kWitnessKindKey[] = "lockstep.kind";
constexpr char kWitnessKind[] = "witness";

}  // namespace

void AddWitnessMark(std::vector<v1::SnapshotMark>& marks, int64_t step, uint64_t param_checksum,
                    int64_t unix_ms) {
  const auto from = std::find_if(marks.begin(), marks.end(),
                                 [step](const v1::SnapshotMark& m) { return m.step() >= step; });
  marks.erase(from, marks.end());
  v1::SnapshotMark& m = marks.emplace_back();
  m.set_step(step);
  m.set_param_checksum(param_checksum);
  m.set_unix_ms(unix_ms);
  if (marks.size() > kMaxWitnessMarks) {
    marks.erase(marks.begin(), marks.begin() + (marks.size() - kMaxWitnessMarks));
  }
}

absl::Status WriteWitness(const std::string& path, const std::vector<v1::SnapshotMark>& marks) {
  const int64_t n = static_cast<int64_t>(marks.size());
  // The checksums' bits as I64 (SafeTensors reads no U64): cast back on reading.
  std::vector<int64_t> step, checksum, ms;
  for (const v1::SnapshotMark& m : marks) {
    step.push_back(m.step());
    checksum.push_back(static_cast<int64_t>(m.param_checksum()));
    ms.push_back(m.unix_ms());
  }
  SafeTensors file;
  file.Add("step", "I64", {n}, step.data(), step.size() * sizeof(int64_t));
  file.Add("param_checksum", "I64", {n}, checksum.data(), checksum.size() * sizeof(int64_t));
  file.Add("unix_ms", "I64", {n}, ms.data(), ms.size() * sizeof(int64_t));
  file.metadata()[kWitnessKindKey] = kWitnessKind;
  return file.Write(path);
}

absl::StatusOr<std::vector<v1::SnapshotMark>> ReadWitness(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return absl::NotFoundError(path + ": no witness");
  ASSIGN_OR_RETURN(const SafeTensors file, SafeTensors::Read(path));
  const auto kind = file.metadata().find(kWitnessKindKey);
  if (kind == file.metadata().end() || kind->second != kWitnessKind) {
    return absl::InvalidArgumentError(path + ": not a witness");
  }
  ASSIGN_OR_RETURN(const std::vector<int64_t> step, file.I64("step"));
  ASSIGN_OR_RETURN(const std::vector<int64_t> checksum, file.I64("param_checksum"));
  ASSIGN_OR_RETURN(const std::vector<int64_t> ms, file.I64("unix_ms"));
  if (checksum.size() != step.size() || ms.size() != step.size()) {
    return absl::InvalidArgumentError(path + ": columns of unequal length");
  }
  std::vector<v1::SnapshotMark> marks;
  for (size_t i = 0; i < step.size(); ++i) {
    v1::SnapshotMark& m = marks.emplace_back();
    m.set_step(step[i]);
    m.set_param_checksum(static_cast<uint64_t>(checksum[i]));
    m.set_unix_ms(ms[i]);
  }
  return marks;
}

}  // namespace lockstep
