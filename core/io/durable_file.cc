// Files that survive a crash at any moment whole: the new contents go to a temporary file beside
// the target, which is fsync'ed and renamed over it, and the folder is fsync'ed. Contract:
// durable_file.h.
#include "core/io/durable_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

constexpr char kTmpSuffix[] = ".tmp";
constexpr int kRandomChars = 6;  // mkostemps' XXXXXX

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

// The mode open(2) would give a new file: 0666 less the process's umask (read from
// /proc/self/status, since umask(2) cannot read it without changing it), or 0600 where the
// kernel does not say.
mode_t NewFileMode() {
  std::FILE* status = std::fopen("/proc/self/status", "re");
  unsigned int mask = 077;
  if (status != nullptr) {
    char line[256];
    while (std::fgets(line, sizeof(line), status) != nullptr) {
      if (std::sscanf(line, "Umask: %o", &mask) == 1) break;
    }
    std::fclose(status);
  }
  return 0666 & ~static_cast<mode_t>(mask);
}

// Fills `fd` (the temporary file `tmp`) with `parts` and makes them durable; closes `fd`.
absl::Status FillAndClose(int fd, const std::string& tmp,
                          const std::vector<std::string_view>& parts) {
  absl::Status st;
  // mkostemps creates 0600; the file gets the mode any new file would (0644 under umask 022,
  // 0600 under the servers' 077: services/common/security/private_files.h).
  if (fchmod(fd, NewFileMode()) != 0) st = Errno(absl::StatusCode::kDataLoss, tmp, "chmod failed");
  for (std::string_view part : parts) {
    if (st.ok() && !WriteAll(fd, part))
      st = Errno(absl::StatusCode::kDataLoss, tmp, "write failed");
  }
  if (st.ok() && fsync(fd) != 0) st = Errno(absl::StatusCode::kDataLoss, tmp, "fsync failed");
  if (close(fd) != 0 && st.ok()) st = Errno(absl::StatusCode::kDataLoss, tmp, "close failed");
  return st;
}

}  // namespace

absl::Status CheckWritable(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot create its folder: ", ec.message()));
  }
  std::string tmp = absl::StrCat(path, ".", std::string(kRandomChars, 'X'), kTmpSuffix);
  const int fd = mkostemps(tmp.data(), sizeof(kTmpSuffix) - 1, O_CLOEXEC);
  if (fd < 0) return Errno(absl::StatusCode::kPermissionDenied, path, "cannot be written");
  close(fd);
  unlink(tmp.c_str());
  return absl::OkStatus();
}

absl::Status WriteFileDurably(const std::string& path, const std::vector<std::string_view>& parts) {
  // The temporary file sits in the target's folder: rename is atomic only within a file system.
  std::string tmp = absl::StrCat(path, ".", std::string(kRandomChars, 'X'), kTmpSuffix);
  const int fd = mkostemps(tmp.data(), sizeof(kTmpSuffix) - 1, O_CLOEXEC);
  if (fd < 0) {
    return Errno(absl::StatusCode::kPermissionDenied, path, "cannot create a temporary file");
  }
  // Held until the process ends or the file is renamed: RemoveTemporaryFiles leaves it be.
  flock(fd, LOCK_EX);
  if (absl::Status st = FillAndClose(fd, tmp, parts); !st.ok()) {
    unlink(tmp.c_str());
    return st;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status st = Errno(absl::StatusCode::kDataLoss, path, "cannot rename into place");
    unlink(tmp.c_str());
    return st;
  }
  std::string dir = fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Errno(absl::StatusCode::kDataLoss, dir, "cannot open");
  const int rc = fsync(dfd);
  close(dfd);
  if (rc != 0) return Errno(absl::StatusCode::kDataLoss, dir, "fsync failed");
  return absl::OkStatus();
}

bool IsTemporaryFileName(std::string_view filename) {
  // Ours are "<name>.XXXXXX.tmp"; before them, writes used "<name>.tmp", which a kill may
  // have left too.
  return filename.size() > sizeof(kTmpSuffix) - 1 && filename.ends_with(kTmpSuffix);
}

int RemoveTemporaryFiles(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  // Best effort, never throwing: a file that cannot be removed stays ignored by readers.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string path = it->path().string();
    if (!IsTemporaryFileName(it->path().filename().string())) continue;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st;
    // A write in flight holds its lock; one that has just created its file and not yet
    // locked it has written nothing.
    const bool orphan = flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &st) == 0 &&
                        S_ISREG(st.st_mode) && (st.st_size > 0 || time(nullptr) - st.st_mtime > 60);
    if (orphan && unlink(path.c_str()) == 0) ++removed;
    close(fd);  // and the lock
  }
  return removed;
}

}  // namespace lockstep
