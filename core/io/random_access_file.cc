// RandomAccessFile: a file read at offsets by several threads, which tells a file that
// changed under it. Contract: random_access_file.h.
#include "core/io/random_access_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

int64_t MtimeNs(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
}

absl::Status CannotOpen(const std::string& path, int err) {
  if (err == ENOENT || err == ENOTDIR) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": no such file"));
  }
  return absl::FailedPreconditionError(absl::StrCat(path, ": ", std::strerror(err)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RandomAccessFile>> RandomAccessFile::Open(const std::string& path,
                                                                         std::string name) {
  if (name.empty()) name = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return CannotOpen(name, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return CannotOpen(name, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(name, S_ISDIR(st.st_mode) ? ": is a folder, not a file" : ": not a file"));
  }
  return std::unique_ptr<RandomAccessFile>(new RandomAccessFile(
      path, std::move(name), fd, static_cast<uint64_t>(st.st_size), MtimeNs(st)));
}

RandomAccessFile::~RandomAccessFile() { ::close(fd_); }

absl::Status RandomAccessFile::Read(uint64_t offset, uint64_t n, char* out) const {
  uint64_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, out + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(name_, ": reading ", n, " bytes at ", offset, ": ", std::strerror(errno)));
    }
    if (got == 0) {
      return absl::FailedPreconditionError(absl::StrCat(name_, ": ", n, " bytes at offset ", offset,
                                                        " are past its end (", offset + done,
                                                        "): the file shrank since it was opened"));
    }
    done += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

absl::Status RandomAccessFile::Read(uint64_t offset, uint64_t n, std::string* out) const {
  out->resize(n);
  return Read(offset, n, out->data());
}

bool RandomAccessFile::Changed() const {
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0) return true;
  return static_cast<uint64_t>(st.st_size) != size_ || MtimeNs(st) != mtime_ns_;
}

absl::StatusOr<FileStamp> StatFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return CannotOpen(path, errno);
  return FileStamp{static_cast<uint64_t>(st.st_size), MtimeNs(st)};
}

}  // namespace lockstep
