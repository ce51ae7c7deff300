#include "core/io/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

absl::Status Errno(absl::StatusCode code, const std::string& path, const char* what) {
  return absl::Status(code, absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

// Writes all of `bytes` to `fd`, retrying short writes and EINTR.
bool WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

absl::Status WriteFileDurably(const std::string& path, const std::vector<std::string_view>& parts) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(absl::StatusCode::kPermissionDenied, tmp, "cannot create");
  bool ok = true;
  for (std::string_view part : parts) ok = ok && WriteAll(fd, part);
  if (!ok) {
    absl::Status st = Errno(absl::StatusCode::kDataLoss, tmp, "write failed");
    close(fd);
    return st;
  }
  if (fsync(fd) != 0) {
    absl::Status st = Errno(absl::StatusCode::kDataLoss, tmp, "fsync failed");
    close(fd);
    return st;
  }
  close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Errno(absl::StatusCode::kDataLoss, path, "cannot rename into place");
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Errno(absl::StatusCode::kDataLoss, dir, "cannot open");
  const int rc = fsync(dfd);
  close(dfd);
  if (rc != 0) return Errno(absl::StatusCode::kDataLoss, dir, "fsync failed");
  return absl::OkStatus();
}

}  // namespace lockstep
