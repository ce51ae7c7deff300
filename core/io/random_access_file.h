// RandomAccessFile: a file read at offsets (pread) by several threads at once, as
// LevelDB's. It keeps the size and modification time it found at Open, so that a reader
// can tell a file that changed under it from a corrupt one. Reads go through the page
// cache like a memory map would, but a file truncated under the reader gives a short
// read (an error) rather than a SIGBUS.
//
// Thread safety: Read and Changed may be called from several threads at once.
#ifndef LOCKSTEP_CORE_IO_RANDOM_ACCESS_FILE_H_
#define LOCKSTEP_CORE_IO_RANDOM_ACCESS_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace lockstep {

class RandomAccessFile {
 public:
  // Opens `path` for reading; messages call it `name` (default: the path; a data root's
  // reader names the path as the spec wrote it, not as resolved). FAILED_PRECONDITION
  // "NAME: no such file" (or the reason it cannot be opened, or "is a folder").
  static absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(const std::string& path,
                                                                std::string name = "");
  ~RandomAccessFile();
  RandomAccessFile(const RandomAccessFile&) = delete;
  RandomAccessFile& operator=(const RandomAccessFile&) = delete;

  const std::string& path() const { return path_; }
  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }
  int64_t mtime_ns() const { return mtime_ns_; }

  // `n` bytes at `offset` into out[0, n). FAILED_PRECONDITION naming the file when fewer
  // are there (it shrank since Open), or the read fails.
  absl::Status Read(uint64_t offset, uint64_t n, char* out) const;
  // The same into *out, resized to n.
  absl::Status Read(uint64_t offset, uint64_t n, std::string* out) const;

  // Whether the file's size or modification time differ from those at Open (or it can
  // no longer be stat'ed).
  bool Changed() const;

 private:
  RandomAccessFile(std::string path, std::string name, int fd, uint64_t size, int64_t mtime_ns)
      : path_(std::move(path)), name_(std::move(name)), fd_(fd), size_(size), mtime_ns_(mtime_ns) {}

  const std::string path_, name_;
  const int fd_;
  const uint64_t size_;
  const int64_t mtime_ns_;
};

// The size and modification time (ns since the epoch) of `path`, FAILED_PRECONDITION
// naming it when it cannot be stat'ed.
struct FileStamp {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};
absl::StatusOr<FileStamp> StatFile(const std::string& path);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_IO_RANDOM_ACCESS_FILE_H_
