// JobRecords: the coordinator's job records on disk, one JSON file per job, and beside each its
// StepHistory. Contract: job_records.h.
#include "services/coordinator/storage/job_records.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/io/durable_file.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

}  // namespace

absl::StatusOr<std::vector<v1::Job>> JobRecords::Load() const {
  std::vector<v1::Job> jobs;
  if (dir_.empty() || !fs::exists(dir_)) return jobs;
  RemoveTemporaryFiles(dir_);  // what kills left; writes in flight are left be
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (entry.path().extension() != ".json") continue;  // a .tmp left by a kill is ignored
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    v1::Job job;
    google::protobuf::util::JsonParseOptions opts;
    opts.ignore_unknown_fields = true;  // records written by a newer coordinator
    auto st = google::protobuf::util::JsonStringToMessage(text.str(), &job, opts);
    if (!st.ok()) {
      return absl::DataLossError(absl::StrCat(entry.path().string(), ": ", st.ToString()));
    }
    jobs.push_back(std::move(job));
  }
  std::sort(jobs.begin(), jobs.end(),
            [](const v1::Job& a, const v1::Job& b) { return a.id() < b.id(); });
  return jobs;
}

absl::Status JobRecords::Save(const v1::Job& job, int64_t version, const StepHistory* history,
                              const std::vector<v1::SnapshotMark>* witness) {
  if (dir_.empty()) return absl::OkStatus();
  std::string text;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(job, &text, opts);
  text += "\n";
  absl::MutexLock lock(&mu_);
  auto it = written_.find(job.id());
  if (it != written_.end() && it->second >= version) return absl::OkStatus();  // stale
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return absl::DataLossError(absl::StrCat(dir_, ": ", ec.message()));
  if (history != nullptr) RETURN_IF_ERROR(history->Write(HistoryPathOf(job.id())));
  if (witness != nullptr) RETURN_IF_ERROR(WriteWitness(WitnessPathOf(job.id()), *witness));
  absl::Status st = WriteFileDurably(PathOf(job.id()), {text});
  if (st.ok()) written_[job.id()] = version;
  return st;
}

absl::StatusOr<StepHistory> JobRecords::LoadHistory(const std::string& id, int64_t budget) const {
  if (dir_.empty()) return StepHistory(budget);
  absl::StatusOr<StepHistory> h = StepHistory::Read(HistoryPathOf(id), budget);
  if (absl::IsNotFound(h.status())) return StepHistory(budget);
  return h;
}

absl::StatusOr<std::vector<v1::SnapshotMark>> JobRecords::LoadWitness(const std::string& id) const {
  if (dir_.empty()) return std::vector<v1::SnapshotMark>();
  absl::StatusOr<std::vector<v1::SnapshotMark>> marks = ReadWitness(WitnessPathOf(id));
  if (absl::IsNotFound(marks.status())) return std::vector<v1::SnapshotMark>();
  return marks;
}

absl::StatusOr<int64_t> JobRecords::LoadNextId() const {
  if (dir_.empty()) return 1;
  std::ifstream in(dir_ + "/next_id");
  if (!in) return 1;
  int64_t next = 0;
  if (!(in >> next) || next < 1) {
    return absl::DataLossError(absl::StrCat(dir_, "/next_id: not a job number"));
  }
  return next;
}

absl::Status JobRecords::SaveNextId(int64_t next) {
  if (dir_.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  return WriteFileDurably(dir_ + "/next_id", {absl::StrCat(next, "\n")});
}

absl::Status JobRecords::Erase(const std::string& id) {
  if (dir_.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  written_.erase(id);
  std::error_code ec;
  fs::remove(HistoryPathOf(id), ec);
  fs::remove(WitnessPathOf(id), ec);
  fs::remove(PathOf(id), ec);
  if (ec) return absl::DataLossError(absl::StrCat(PathOf(id), ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace lockstep
