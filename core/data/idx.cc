// IDX files (MNIST's format, reference §9), plain or gzip-compressed (read through zlib), with
// strict validation: every error names the file. Contract: idx.h.
#include "core/data/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lockstep {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly n bytes; returns how many were read, or -1 on a zlib error.
int64_t ReadFull(gzFile f, uint8_t* out, uint64_t n) {
  uint64_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(n - done, 1u << 30));
    const int got = gzread(f, out + done, chunk);
    if (got < 0) return -1;
    if (got == 0) break;
    done += static_cast<uint64_t>(got);
  }
  return static_cast<int64_t>(done);
}

absl::Status Corrupt(const std::string& path, gzFile f) {
  int errnum = 0;
  const char* msg = gzerror(f, &errnum);
  return absl::DataLossError(absl::StrCat(path, ": unreadable (", msg ? msg : "zlib error", ")"));
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdx(const std::string& path, int expected_ndim, uint64_t max_bytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  GzFile f(gzopen(path.c_str(), "rb"));  // reads plain files transparently
  if (!f) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));

  uint8_t magic[4];
  int64_t got = ReadFull(f.get(), magic, 4);
  if (got < 0) return Corrupt(path, f.get());
  if (got < 4) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: ", got, " bytes, no IDX header"));
  }
  const uint32_t expected = 0x00000800u | static_cast<uint32_t>(expected_ndim);
  const uint32_t actual = (uint32_t{magic[0]} << 24) | (uint32_t{magic[1]} << 16) |
                          (uint32_t{magic[2]} << 8) | magic[3];
  if (actual != expected) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: wrong magic 0x%08x (expected 0x%08x: uint8 data, %d dimensions)", path,
                        actual, expected, expected_ndim));
  }
  IdxArray out;
  uint64_t total = 1;
  for (int d = 0; d < expected_ndim; ++d) {
    uint8_t b[4];
    got = ReadFull(f.get(), b, 4);
    if (got < 0) return Corrupt(path, f.get());
    if (got < 4) return absl::DataLossError(absl::StrCat(path, ": truncated in the header"));
    const uint32_t dim =
        (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    if (dim == 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": dimension ", d, " is 0"));
    }
    out.dims.push_back(dim);
    total *= dim;
    if (total > max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": header declares more than ",
                                                     max_bytes, " bytes of data (the limit)"));
    }
  }
  out.data.resize(total);
  got = ReadFull(f.get(), out.data.data(), total);
  if (got < 0) return Corrupt(path, f.get());
  if (static_cast<uint64_t>(got) < total) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: header declares ", total,
                                            " bytes of data, file has ", got));
  }
  uint8_t extra;
  got = ReadFull(f.get(), &extra, 1);
  if (got < 0) return Corrupt(path, f.get());
  if (got > 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": has data after the ", total, " bytes its header declares"));
  }
  return out;
}

}  // namespace lockstep
