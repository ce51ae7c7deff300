#include "services/coordinator/job_records.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

absl::Status Errno(const std::string& path, const char* what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

// Writes `text` to `path` atomically and durably (write, fsync, rename, fsync the folder).
absl::Status WriteDurably(const std::string& dir, const std::string& path,
                          const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(tmp, "cannot create");
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status st = Errno(tmp, "write failed");
      close(fd);
      return st;
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    absl::Status st = Errno(tmp, "fsync failed");
    close(fd);
    return st;
  }
  close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Errno(path, "cannot rename into place");
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Errno(dir, "cannot open");
  const int rc = fsync(dfd);
  close(dfd);
  if (rc != 0) return Errno(dir, "fsync failed");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<v1::Job>> JobRecords::Load() const {
  std::vector<v1::Job> jobs;
  if (dir_.empty() || !fs::exists(dir_)) return jobs;
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

absl::Status JobRecords::Save(const v1::Job& job, int64_t version) {
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
  absl::Status st = WriteDurably(dir_, PathOf(job.id()), text);
  if (st.ok()) written_[job.id()] = version;
  return st;
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
  return WriteDurably(dir_, dir_ + "/next_id", absl::StrCat(next, "\n"));
}

absl::Status JobRecords::Erase(const std::string& id) {
  if (dir_.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  written_.erase(id);
  std::error_code ec;
  fs::remove(PathOf(id), ec);
  if (ec) return absl::DataLossError(absl::StrCat(PathOf(id), ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace lockstep
