// NumPy's .npz files: a zip archive of .npy files, one per array, read with libzip.
// Contract: npz.h.
#include "core/data/npz.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

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

// A .npy entry is its data plus a header (ParseNpy takes headers up to 64 KiB).
constexpr uint64_t kNpyOverhead = (1 << 16) + 16;
// Deflate expands a byte to at most 1032 (258-byte matches of 2 bits each, about).
constexpr uint64_t kMaxDeflateRatio = 1032;
// Where a zip archive's end record can be: its last 22 bytes, but for a 64 KiB comment.
constexpr uint64_t kEndSearch = 22 + 0xffff;

std::string Listed(const std::vector<std::string>& keys) {
  if (keys.empty()) return "none";
  std::vector<std::string> quoted;
  for (const std::string& k : keys) quoted.push_back(absl::StrCat("'", k, "'"));
  return absl::StrJoin(quoted, ", ");
}

std::string ZipMessage(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string out = zip_error_strerror(&e);
  zip_error_fini(&e);
  return out;
}

// `n` bytes of `fd` at `offset` (fewer where the file ends first).
std::string ReadAt(int fd, uint64_t offset, uint64_t n) {
  std::string out(n, '\0');
  const ssize_t got = ::pread(fd, out.data(), n, static_cast<off_t>(offset));
  out.resize(got > 0 ? static_cast<size_t>(got) : 0);
  return out;
}

// Why libzip found no zip archive in `fd` (`size` bytes): a .npy, a zip archive whose
// directory is not where its end record says (cut short, or data before the archive), one
// that lost its end record, or something else.
absl::Status NotAZip(const std::string& path, int fd, uint64_t size) {
  const std::string head = ReadAt(fd, 0, 6);
  if (head == "\x93NUMPY") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a .npy file, not a .npz (write the arrays with np.savez)"));
  }
  const uint64_t tail = std::min(size, kEndSearch);
  if (ReadAt(fd, size - tail, tail).find("PK\x05\x06") != std::string::npos) {
    return absl::DataLossError(absl::StrCat(
        path,
        ": corrupt zip archive: no central directory where its end record says (the file "
        "was cut short, or data precedes the archive, which is not supported)"));
  }
  if (absl::StartsWith(head, "PK\x03\x04")) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated zip archive (no end of central directory record)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(path, ": not a .npz file (not a zip archive)"));
}

// libzip's reason for not opening `path` (`fd`, `size` bytes).
absl::Status OpenError(const std::string& path, int fd, uint64_t size, int code) {
  switch (code) {
    case ZIP_ER_NOZIP:
      return NotAZip(path, fd, size);
    case ZIP_ER_MULTIDISK:
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a zip archive split over several disks is not supported"));
    case ZIP_ER_INCONS:
      return absl::DataLossError(absl::StrCat(
          path, ": corrupt zip archive: its directory is inconsistent (libzip: ", ZipMessage(code),
          ")"));
    default:
      return absl::DataLossError(
          absl::StrCat(path, ": corrupt zip archive (libzip: ", ZipMessage(code), ")"));
  }
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
  const auto size = static_cast<uint64_t>(st.st_size);
  int code = 0;
  zip_t* archive = zip_fdopen(fd, ZIP_RDONLY, &code);  // owns fd once it succeeds
  if (archive == nullptr) {
    absl::Status why = OpenError(path, fd, size, code);
    ::close(fd);
    return why;
  }
  std::unique_ptr<NpzFile> f(new NpzFile(path, archive, max_bytes));
  RETURN_IF_ERROR(f->ReadDirectory(size));
  return f;
}

NpzFile::~NpzFile() { zip_discard(archive_); }

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

absl::Status NpzFile::ReadDirectory(uint64_t file_size) {
  const zip_int64_t n = zip_get_num_entries(archive_, 0);
  std::set<std::string> names;
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_stat_t st;
    if (zip_stat_index(archive_, static_cast<zip_uint64_t>(i), ZIP_FL_ENC_RAW, &st) != 0) {
      return absl::DataLossError(absl::StrCat(path_, ": corrupt zip archive: entry ", i, " (",
                                              zip_strerror(archive_), ")"));
    }
    Entry e;
    e.index = static_cast<uint64_t>(i);
    e.name = st.name;
    e.method = st.comp_method;
    e.compressed = st.comp_size;
    e.uncompressed = st.size;
    if (st.encryption_method != ZIP_EM_NONE) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": entry '", e.name, "' is encrypted (not supported)"));
    }
    if (e.method != ZIP_CM_STORE && e.method != ZIP_CM_DEFLATE) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": entry '", e.name, "' uses compression method ", e.method,
                       " (np.savez writes 0, stored, and np.savez_compressed 8, deflated)"));
    }
    if (e.compressed > file_size) {
      return absl::DataLossError(absl::StrCat(path_, ": corrupt zip archive: entry '", e.name,
                                              "' lies outside the archive's data"));
    }
    if (!names.insert(e.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": two entries are named '", e.name, "'"));
    }
    entries_.push_back(std::move(e));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> NpzFile::Contents(const Entry& e, const std::string& what) const {
  if (e.uncompressed > max_bytes_ + kNpyOverhead) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", e.uncompressed, " bytes, more than the limit of ", max_bytes_));
  }
  if (e.method == ZIP_CM_STORE && e.compressed != e.uncompressed) {
    return absl::DataLossError(absl::StrCat(what, ": a stored entry of ", e.compressed,
                                            " bytes that says it holds ", e.uncompressed));
  }
  if (e.method == ZIP_CM_DEFLATE && e.uncompressed > e.compressed * kMaxDeflateRatio + 1024) {
    return absl::DataLossError(absl::StrCat(what, ": ", e.compressed,
                                            " deflated bytes cannot hold the ", e.uncompressed,
                                            " its directory entry says"));
  }
  // libzip's reason for a failed read: a CRC-32 mismatch named as one.
  const auto failed = [&what](zip_error_t* error) {
    if (zip_error_code_zip(error) == ZIP_ER_CRC) {
      return absl::DataLossError(absl::StrCat(what, ": CRC-32 mismatch (corrupt data)"));
    }
    return absl::DataLossError(absl::StrCat(what, ": ", zip_error_strerror(error)));
  };
  absl::MutexLock lock(&mu_);
  zip_file_t* file = zip_fopen_index(archive_, e.index, 0);
  if (file == nullptr) return failed(zip_get_error(archive_));
  // Read to the entry's end, one byte past its size: libzip checks the CRC-32 there.
  std::string out(e.uncompressed + 1, '\0');
  uint64_t got = 0;
  zip_int64_t k = 0;
  while (got < out.size() && (k = zip_fread(file, out.data() + got, out.size() - got)) > 0) {
    got += static_cast<uint64_t>(k);
  }
  absl::Status st;
  if (k < 0) {
    st = failed(zip_file_get_error(file));
  } else if (got > e.uncompressed) {
    st = absl::DataLossError(absl::StrCat(what, ": holds more than the ", e.uncompressed,
                                          " bytes its directory entry says"));
  } else if (got < e.uncompressed) {
    st = absl::DataLossError(absl::StrCat(what, ": holds ", got, " bytes, not the ", e.uncompressed,
                                          " its directory entry says"));
  }
  zip_fclose(file);
  RETURN_IF_ERROR(st);
  out.resize(e.uncompressed);
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
