// Fuzzes the IDX reader (core/data/idx.h), plain and gzip-compressed, as a worker reads
// a dataset: every dimension count the reader is asked for, and a data limit of 1 MiB so
// that a header declaring more is an error rather than a large allocation.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/data/idx.h"
#include "tests/fuzz/memory_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint64_t kMaxBytes = 1 << 20;
  const std::string path = lockstep::fuzz::MemoryFile(data, size);
  for (int ndim = 1; ndim <= 4; ++ndim) {
    absl::StatusOr<lockstep::IdxArray> idx = lockstep::ReadIdx(path, ndim, kMaxBytes);
    if (!idx.ok()) continue;
    // What it read is what its header says.
    uint64_t total = 1;
    for (int64_t d : idx->dims) total *= static_cast<uint64_t>(d);
    if (idx->dims.size() != static_cast<size_t>(ndim) || total != idx->data.size() ||
        total > kMaxBytes) {
      std::abort();
    }
  }
  return 0;
}
