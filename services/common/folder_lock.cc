// FolderLock: one process at a time in a folder (the coordinator's --state_dir).
// Contract: folder_lock.h.
#include "services/common/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<FolderLock>> FolderLock::Acquire(const std::string& what,
                                                                const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "LOCK").string();
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(what, ": cannot open ", path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[256] = {};
    const ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
    close(fd);
    if (err != EWOULDBLOCK) {
      return absl::PermissionDeniedError(
          absl::StrCat(what, ": cannot lock ", path, ": ", std::strerror(err)));
    }
    const std::string who(absl::StripAsciiWhitespace(std::string(holder, n > 0 ? n : 0)));
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", dir, " is in use by another coordinator (",
                     who.empty() ? "it has not written its pid yet" : who,
                     "): two on one folder would each recover its jobs; stop that one first"));
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string me = absl::StrCat("pid ", getpid(), " on ", host, "\n");
  // Locked all the same if this fails: only the next one's message is poorer.
  if (ftruncate(fd, 0) == 0) (void)!pwrite(fd, me.data(), me.size(), 0);
  return std::unique_ptr<FolderLock>(new FolderLock(fd));
}

FolderLock::~FolderLock() {
  // Closing the descriptor releases the lock. The file stays: removing it would let a
  // third process lock a new file while a second still waits on the old one.
  close(fd_);
}

}  // namespace lockstep
