#include "services/coordinator/job_records.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace lockstep {

namespace fs = std::filesystem;

absl::StatusOr<std::vector<v1::Job>> JobRecords::Load() const {
  std::vector<v1::Job> jobs;
  if (dir_.empty() || !fs::exists(dir_)) return jobs;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (entry.path().extension() != ".json") continue;
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

absl::Status JobRecords::Save(const v1::Job& job) const {
  if (dir_.empty()) return absl::OkStatus();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  std::string text;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(job, &text, opts);
  const std::string path = absl::StrCat(dir_, "/", job.id(), ".json");
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << "\n";
    if (!out.flush()) return absl::DataLossError(absl::StrCat(tmp, ": write failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": cannot rename into place"));
  }
  return absl::OkStatus();
}

absl::Status JobRecords::Erase(const std::string& id) const {
  if (dir_.empty()) return absl::OkStatus();
  std::error_code ec;
  fs::remove(absl::StrCat(dir_, "/", id, ".json"), ec);
  return absl::OkStatus();
}

}  // namespace lockstep
