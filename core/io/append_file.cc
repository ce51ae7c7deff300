// AppendFile: a file that grows by whole appends, for logs and event files written while a job
// runs. Contract: append_file.h.
#include "core/io/append_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

absl::Status ErrnoStatus(const std::string& path, const char* what, int err) {
  const std::string msg = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::DataLossError(msg);
}

class PosixAppendFile final : public AppendFile {
 public:
  PosixAppendFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixAppendFile() override { close(fd_); }

  absl::Status Append(std::string_view data) override {
    const off_t before = lseek(fd_, 0, SEEK_END);
    if (before < 0) return ErrnoStatus(path_, "seek", errno);
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = write(fd_, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : ENOSPC;  // a write of 0 bytes: no room
        // Cut back the part that made it, so that no torn record stays.
        if (done > 0 && ftruncate(fd_, before) != 0) {
          return ErrnoStatus(path_, "cut back after a failed write", errno);
        }
        return ErrnoStatus(path_, "write", err);
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  const int fd_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AppendFile>> AppendFile::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
    return absl::PermissionDeniedError(msg);
  }
  return std::unique_ptr<AppendFile>(new PosixAppendFile(path, fd));
}

}  // namespace lockstep
