// IDX files (MNIST's format, reference §9), plain or gzip-compressed (read through
// zlib), with strict validation: every error names the file.
#ifndef LOCKSTEP_CORE_DATA_IDX_H_
#define LOCKSTEP_CORE_DATA_IDX_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;  // row-major
};

// Reads a uint8 IDX file whose magic must be 0x0000080<ndim>, of any size (by default: no
// limit but the file's; memory grows with the data read, not with what the header says).
// Errors: NOT_FOUND (missing), INVALID_ARGUMENT (wrong magic or ndim, a zero dimension,
// or a header declaring more than max_bytes of data), DATA_LOSS (truncated, or bytes
// after the data, or a corrupt gzip stream).
absl::StatusOr<IdxArray> ReadIdx(const std::string& path, int expected_ndim,
                                 uint64_t max_bytes = std::numeric_limits<uint64_t>::max());

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_IDX_H_
