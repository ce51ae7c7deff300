// A file in memory for fuzz targets whose reader takes a path (the IDX reader goes
// through zlib's gzopen): the input is written to a memfd and read back through
// /proc/self/fd, so the real reader runs and nothing is written to any disk.
#ifndef LOCKSTEP_TESTS_FUZZ_MEMORY_FILE_H_
#define LOCKSTEP_TESTS_FUZZ_MEMORY_FILE_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace lockstep::fuzz {

// The path of a file holding exactly `data`. One file per process, rewritten on each call:
// the path is good until the next call.
inline std::string MemoryFile(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("lockstep-fuzz", 0);
  if (fd < 0) {
    std::perror("memfd_create");
    std::abort();
  }
  if (ftruncate(fd, 0) != 0) std::abort();
  for (size_t done = 0; done < size;) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace lockstep::fuzz

#endif  // LOCKSTEP_TESTS_FUZZ_MEMORY_FILE_H_
