// Private by default: what a Lockstep server or command writes is its owner's alone. Contract:
// private_files.h.
#include "services/common/security/private_files.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

constexpr mode_t kGroupAndOther = S_IRWXG | S_IRWXO;

// Removes `path`'s group and other bits unless it is a symlink (with `follow`: what the
// symlink names), counting what it did into `out`.
absl::Status Tighten(const fs::path& path, bool follow, Tightened& out) {
  struct stat st;
  if ((follow ? stat(path.c_str(), &st) : lstat(path.c_str(), &st)) != 0) {
    if (errno == ENOENT) return absl::OkStatus();  // gone meanwhile
    return absl::PermissionDeniedError(absl::StrCat(path.string(), ": ", std::strerror(errno)));
  }
  if (S_ISLNK(st.st_mode) || (st.st_mode & kGroupAndOther) == 0) return absl::OkStatus();
  if (chmod(path.c_str(), st.st_mode & 07777 & ~kGroupAndOther) == 0) {
    ++out.changed;
  } else if (errno == EPERM) {
    if (out.not_ours++ == 0) out.first_not_ours = path.string();
  } else {
    return absl::PermissionDeniedError(
        absl::StrCat(path.string(), ": cannot make it private: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

void SetPrivateUmask() { umask(S_IRWXG | S_IRWXO); }

absl::StatusOr<Tightened> TightenModes(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": no such folder"));
  }
  Tightened out;
  // The folder itself may be a symlink (to a volume mounted elsewhere): what it names is
  // tightened; no symlink under it is followed.
  if (absl::Status st = Tighten(dir, /*follow=*/true, out); !st.ok()) return st;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (absl::Status st = Tighten(it->path(), /*follow=*/false, out); !st.ok()) return st;
  }
  if (ec) return absl::PermissionDeniedError(absl::StrCat(dir, ": ", ec.message()));
  return out;
}

absl::Status MakeFolderPrivate(const std::string& what, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(what, " ", dir, ": ", ec.message()));
  absl::StatusOr<Tightened> done = TightenModes(dir);
  if (!done.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(what, " ", done.status().message()));
  }
  if (done->changed > 0 || done->not_ours > 0) {
    spdlog::warn("{} {}: {} files and folders were open to other users; now the owner's only{}",
                 what, dir, done->changed,
                 done->not_ours == 0 ? ""
                                     : absl::StrCat(" (", done->not_ours,
                                                    " owned by another user left as they are, ",
                                                    done->first_not_ours, " first)"));
  }
  return absl::OkStatus();
}

absl::Status WritePrivate(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat(tmp, ": ", std::strerror(errno)));
  bool ok = fchmod(fd, 0600) == 0;  // an old file keeps its mode through O_TRUNC
  for (size_t done = 0; ok && done < data.size();) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ok && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    unlink(tmp.c_str());
    return absl::DataLossError(absl::StrCat(path, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
