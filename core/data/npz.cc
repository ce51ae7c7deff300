// NumPy's .npz files: a zip archive of .npy files, one per array. Contract: npz.h.
#include "core/data/npz.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr uint64_t kLocalSize = 30, kCentralSize = 46, kEndSize = 22;
constexpr uint64_t kZip64LocatorSize = 20, kZip64EndSize = 56;
constexpr uint64_t kMaxComment = 0xffff;
constexpr uint64_t kMaxDirectoryBytes = 64 << 20;
// A .npy entry is its data plus a header (ParseNpy takes headers up to 64 KiB).
constexpr uint64_t kNpyOverhead = (1 << 16) + 16;
// Deflate expands a byte to at most 1032 (258-byte matches of 2 bits each, about).
constexpr uint64_t kMaxDeflateRatio = 1032;
constexpr uint64_t kChunk = 1 << 20;
constexpr uint16_t kStored = 0, kDeflated = 8;

uint64_t Le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(Le(p, 2)); }
uint32_t U32(const uint8_t* p) { return static_cast<uint32_t>(Le(p, 4)); }
uint64_t U64(const uint8_t* p) { return Le(p, 8); }

std::string Listed(const std::vector<std::string>& keys) {
  if (keys.empty()) return "none";
  std::vector<std::string> quoted;
  for (const std::string& k : keys) quoted.push_back(absl::StrCat("'", k, "'"));
  return absl::StrJoin(quoted, ", ");
}

// Replaces the saturated 32-bit sizes and offset of a central directory entry with
// their values from its zip64 extra field (id 1), which holds only those, in this order.
absl::Status ApplyZip64Extra(const uint8_t* extra, uint64_t len, bool sizes_saturated[2],
                             bool offset_saturated, uint64_t* uncompressed, uint64_t* compressed,
                             uint64_t* offset) {
  for (uint64_t at = 0; at + 4 <= len;) {
    const uint16_t id = U16(extra + at), size = U16(extra + at + 2);
    if (at + 4 + size > len) break;
    if (id == 1) {
      const uint8_t* p = extra + at + 4;
      uint64_t left = size;
      for (auto [saturated, field] :
           {std::pair(sizes_saturated[0], uncompressed), std::pair(sizes_saturated[1], compressed),
            std::pair(offset_saturated, offset)}) {
        if (!saturated) continue;
        if (left < 8) return absl::DataLossError("its zip64 extra field is too short");
        *field = U64(p);
        p += 8;
        left -= 8;
      }
      return absl::OkStatus();
    }
    at += 4 + size;
  }
  if (sizes_saturated[0] || sizes_saturated[1] || offset_saturated) {
    return absl::DataLossError("its sizes need a zip64 extra field, and it has none");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NpzFile>> NpzFile::Open(const std::string& path,
                                                       uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(absl::StrCat(path, ": cannot open (", strerror(errno), ")"));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  std::unique_ptr<NpzFile> f(new NpzFile(path, fd, static_cast<uint64_t>(st.st_size), max_bytes));
  RETURN_IF_ERROR(f->ReadDirectory());
  return f;
}

NpzFile::~NpzFile() { ::close(fd_); }

std::vector<std::string> NpzFile::keys() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) {
    out.push_back(absl::EndsWith(e.name, ".npy") ? e.name.substr(0, e.name.size() - 4) : e.name);
  }
  return out;
}

const NpzFile::Entry* NpzFile::Find(const std::string& key) const {
  // As np.load: the entry's own name first, then the name with ".npy".
  for (const std::string& name : {key, key + ".npy"}) {
    for (const Entry& e : entries_) {
      if (e.name == name) return &e;
    }
  }
  return nullptr;
}

absl::Status NpzFile::ReadAt(uint64_t offset, void* out, uint64_t n,
                             const std::string& what) const {
  auto* p = static_cast<char*>(out);
  for (uint64_t done = 0; done < n;) {
    const ssize_t got = ::pread(fd_, p + done, std::min<uint64_t>(n - done, 1 << 30),
                                static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return absl::DataLossError(absl::StrCat(path_, ": ", what, ": ", strerror(errno)));
    }
    if (got == 0) {
      return absl::DataLossError(absl::StrCat(path_, ": ", what, ": the file ended early"));
    }
    done += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

absl::Status NpzFile::ReadDirectory() {
  const auto corrupt = [&](const std::string& msg) {
    return absl::DataLossError(absl::StrCat(path_, ": corrupt zip archive: ", msg));
  };
  // The end record is the last 22 bytes but for a comment of up to 64 KiB.
  const uint64_t tail = std::min(size_, kEndSize + kMaxComment);
  std::vector<uint8_t> buf(tail);
  RETURN_IF_ERROR(ReadAt(size_ - tail, buf.data(), tail, "the zip end record"));
  int64_t at = -1;
  for (int64_t i = static_cast<int64_t>(tail) - static_cast<int64_t>(kEndSize); i >= 0; --i) {
    if (U32(&buf[i]) == kEndSig && U16(&buf[i + 20]) == tail - i - kEndSize) {
      at = i;
      break;
    }
  }
  if (at < 0) {
    uint8_t head[6] = {};
    if (size_ >= 6) RETURN_IF_ERROR(ReadAt(0, head, 6, "its first bytes"));
    if (std::memcmp(head, "\x93NUMPY", 6) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": a .npy file, not a .npz (write the arrays with np.savez)"));
    }
    if (U32(head) == kLocalSig) {
      return absl::DataLossError(
          absl::StrCat(path_, ": truncated zip archive (no end of central directory record)"));
    }
    return absl::InvalidArgumentError(absl::StrCat(path_, ": not a .npz file (not a zip archive)"));
  }
  const uint8_t* end = &buf[at];
  const uint64_t end_pos = size_ - tail + static_cast<uint64_t>(at);
  uint64_t disk = U16(end + 4), cd_disk = U16(end + 6), n_disk = U16(end + 8);
  uint64_t n = U16(end + 10), cd_size = U32(end + 12), cd_offset = U32(end + 16);
  uint64_t cd_end = end_pos;  // the directory ends where the (zip64) end record starts
  uint8_t loc[kZip64LocatorSize] = {};
  if (end_pos >= kZip64LocatorSize) {
    RETURN_IF_ERROR(ReadAt(end_pos - kZip64LocatorSize, loc, kZip64LocatorSize, "the zip end"));
  }
  if (U32(loc) == kZip64LocatorSig) {
    const uint64_t z64 = U64(loc + 8);
    if (U32(loc + 4) != 0 || U32(loc + 16) > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": a zip archive split over several disks is not supported"));
    }
    if (z64 > end_pos - kZip64LocatorSize || end_pos - kZip64LocatorSize - z64 < kZip64EndSize) {
      return corrupt("its zip64 end record is not where its locator says");
    }
    uint8_t rec[kZip64EndSize];
    RETURN_IF_ERROR(ReadAt(z64, rec, kZip64EndSize, "the zip64 end record"));
    if (U32(rec) != kZip64EndSig) return corrupt("no zip64 end record where its locator says");
    disk = U32(rec + 16);
    cd_disk = U32(rec + 20);
    n_disk = U64(rec + 24);
    n = U64(rec + 32);
    cd_size = U64(rec + 40);
    cd_offset = U64(rec + 48);
    cd_end = z64;
  } else if (n == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    return corrupt("its end record needs a zip64 record, and there is none");
  }
  if (disk != 0 || cd_disk != 0 || n_disk != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": a zip archive split over several disks is not supported"));
  }
  if (cd_offset > cd_end || cd_size != cd_end - cd_offset) {
    return corrupt(
        "its central directory is not where its end record says (or data precedes "
        "the archive, which is not supported)");
  }
  if (cd_size > kMaxDirectoryBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": a central directory of ", cd_size,
                                                   " bytes (the limit is ", kMaxDirectoryBytes,
                                                   ")"));
  }
  if (n > cd_size / kCentralSize) {
    return corrupt(absl::StrCat(n, " entries cannot fit its ", cd_size, "-byte directory"));
  }
  std::vector<uint8_t> cd(cd_size);
  RETURN_IF_ERROR(ReadAt(cd_offset, cd.data(), cd_size, "the central directory"));
  data_end_ = cd_offset;
  std::set<std::string> names;
  uint64_t pos = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t* h = cd.data() + pos;
    if (cd_size - pos < kCentralSize || U32(h) != kCentralSig) {
      return corrupt(absl::StrCat("entry ", i, " of its central directory is not one"));
    }
    const uint64_t name_len = U16(h + 28), extra_len = U16(h + 30), comment_len = U16(h + 32);
    if (cd_size - pos - kCentralSize < name_len + extra_len + comment_len) {
      return corrupt(absl::StrCat("entry ", i, " runs past the central directory"));
    }
    Entry e;
    e.flags = U16(h + 8);
    e.method = U16(h + 10);
    e.crc = U32(h + 16);
    e.compressed = U32(h + 20);
    e.uncompressed = U32(h + 24);
    e.offset = U32(h + 42);
    e.name.assign(reinterpret_cast<const char*>(h + kCentralSize), name_len);
    bool sizes[2] = {e.uncompressed == 0xffffffff, e.compressed == 0xffffffff};
    if (absl::Status st =
            ApplyZip64Extra(h + kCentralSize + name_len, extra_len, sizes, e.offset == 0xffffffff,
                            &e.uncompressed, &e.compressed, &e.offset);
        !st.ok()) {
      return corrupt(absl::StrCat("entry '", e.name, "': ", st.message()));
    }
    if (e.flags & 0x41) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": entry '", e.name, "' is encrypted (not supported)"));
    }
    if (e.method != kStored && e.method != kDeflated) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": entry '", e.name, "' uses compression method ", e.method,
                       " (np.savez writes 0, stored, and np.savez_compressed 8, deflated)"));
    }
    if (e.offset > data_end_ || data_end_ - e.offset < kLocalSize ||
        e.compressed > data_end_ - e.offset - kLocalSize) {
      return corrupt(absl::StrCat("entry '", e.name, "' lies outside the archive's data"));
    }
    if (!names.insert(e.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": two entries are named '", e.name, "'"));
    }
    entries_.push_back(std::move(e));
    pos += kCentralSize + name_len + extra_len + comment_len;
  }
  if (pos != cd_size) return corrupt("its central directory has bytes after its entries");
  return absl::OkStatus();
}

absl::StatusOr<std::string> NpzFile::Contents(const Entry& e, const std::string& what) const {
  uint8_t local[kLocalSize];
  RETURN_IF_ERROR(ReadAt(e.offset, local, kLocalSize, "a local header"));
  const uint64_t name_len = U16(local + 26), extra_len = U16(local + 28);
  const uint64_t start = e.offset + kLocalSize + name_len + extra_len;
  if (U32(local) != kLocalSig || U16(local + 8) != e.method || start > data_end_ ||
      e.compressed > data_end_ - start) {
    return absl::DataLossError(
        absl::StrCat(what, ": its local zip header does not match the central directory"));
  }
  std::string name(name_len, '\0');
  RETURN_IF_ERROR(ReadAt(e.offset + kLocalSize, name.data(), name_len, "a local header"));
  if (name != e.name) {
    return absl::DataLossError(absl::StrCat(what, ": its local zip header names '", name, "'"));
  }
  if (e.uncompressed > max_bytes_ + kNpyOverhead) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", e.uncompressed, " bytes, more than the limit of ", max_bytes_));
  }
  std::string out;
  if (e.method == kStored) {
    if (e.compressed != e.uncompressed) {
      return absl::DataLossError(absl::StrCat(what, ": a stored entry of ", e.compressed,
                                              " bytes that says it holds ", e.uncompressed));
    }
    out.resize(e.uncompressed);
    RETURN_IF_ERROR(ReadAt(start, out.data(), out.size(), what));
  } else {
    if (e.uncompressed > e.compressed * kMaxDeflateRatio + 1024) {
      return absl::DataLossError(absl::StrCat(what, ": ", e.compressed,
                                              " deflated bytes cannot hold the ", e.uncompressed,
                                              " its directory entry says"));
    }
    out.resize(e.uncompressed);
    z_stream zs{};
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) return absl::InternalError("inflateInit2 failed");
    std::vector<char> in(std::min<uint64_t>(e.compressed, kChunk));
    uint64_t read = 0;
    absl::Status st;
    while (st.ok()) {
      if (zs.avail_in == 0 && read < e.compressed) {
        const uint64_t k = std::min<uint64_t>(in.size(), e.compressed - read);
        st = ReadAt(start + read, in.data(), k, what);
        zs.next_in = reinterpret_cast<Bytef*>(in.data());
        zs.avail_in = static_cast<uInt>(k);
        read += k;
        continue;
      }
      zs.next_out = reinterpret_cast<Bytef*>(out.data()) + zs.total_out;
      zs.avail_out = static_cast<uInt>(std::min<uint64_t>(out.size() - zs.total_out, 1 << 30));
      const int rc = inflate(&zs, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) break;
      if (rc == Z_OK) continue;
      // No progress: more input to read, or an error (each ends the loop).
      if (rc == Z_BUF_ERROR && zs.avail_in == 0 && read < e.compressed) continue;
      if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
        st = absl::DataLossError(absl::StrCat(what, ": its deflate stream ends early"));
      } else if (rc == Z_BUF_ERROR && zs.total_out == out.size()) {
        st = absl::DataLossError(absl::StrCat(what, ": inflates to more than the ", out.size(),
                                              " bytes its directory entry says"));
      } else {
        st = absl::DataLossError(absl::StrCat(what, ": corrupt deflate stream (",
                                              zs.msg != nullptr ? zs.msg : "zlib error", ")"));
      }
    }
    const uint64_t produced = zs.total_out;
    const bool trailing = zs.avail_in != 0 || read != e.compressed;
    inflateEnd(&zs);
    RETURN_IF_ERROR(st);
    if (trailing) {
      return absl::DataLossError(
          absl::StrCat(what, ": its deflate stream ends before its ", e.compressed, " bytes do"));
    }
    if (produced != out.size()) {
      return absl::DataLossError(absl::StrCat(what, ": inflates to ", produced, " bytes, not the ",
                                              out.size(), " its directory entry says"));
    }
  }
  uLong crc = crc32(0, Z_NULL, 0);
  for (uint64_t at = 0; at < out.size(); at += 1 << 30) {
    crc = crc32(crc, reinterpret_cast<const Bytef*>(out.data()) + at,
                static_cast<uInt>(std::min<uint64_t>(out.size() - at, 1 << 30)));
  }
  if (crc != e.crc) {
    return absl::DataLossError(absl::StrCat(what, ": CRC-32 mismatch (corrupt data)"));
  }
  return out;
}

absl::StatusOr<NpyArray> NpzFile::Read(const std::string& key) const {
  const std::string what = absl::StrCat(path_, ": array '", key, "'");
  const Entry* e = Find(key);
  if (e == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(path_, ": no array '", key, "' (it holds ", Listed(keys()), ")"));
  }
  ASSIGN_OR_RETURN(std::string bytes, Contents(*e, what));
  return ParseNpy(std::move(bytes), what, max_bytes_);
}

}  // namespace lockstep
