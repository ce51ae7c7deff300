// The offset index of one TFRecord shard (each record's start, length and label),
// built once and stored. Contract: tfrecord_index.h.
#include "core/data/tfrecord_index.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/data/tf_example.h"
#include "core/io/durable_file.h"
#include "core/io/tfrecord.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

constexpr char kIndexMagic[] = "LSTFIDX1";
constexpr size_t kDigestBytes = 32;
constexpr uint64_t kReadChunk = 4 << 20;
constexpr uint64_t kMaxIndexedRecords = uint64_t{1} << 32;

std::string Sha256(absl::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<char*>(md), len);
}

// A shard read front to back through one buffer of a few MiB.
class SequentialReader {
 public:
  explicit SequentialReader(const RandomAccessFile& f) : f_(f) {}
  // Bytes [offset, offset + n) of the file (the caller keeps them inside it).
  absl::StatusOr<absl::string_view> Get(uint64_t offset, uint64_t n) {
    if (offset < start_ || offset + n > start_ + buf_.size()) {
      start_ = offset;
      RETURN_IF_ERROR(
          f_.Read(offset, std::min(std::max(n, kReadChunk), f_.size() - offset), &buf_));
    }
    return absl::string_view(buf_).substr(offset - start_, n);
  }

 private:
  const RandomAccessFile& f_;
  std::string buf_;
  uint64_t start_ = 0;
};

void Put64(uint64_t v, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutString(const std::string& s, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(s.size() >> (8 * i)));
  out->append(s);
}

// A cursor over a stored index; every read bounded.
class IndexReader {
 public:
  explicit IndexReader(absl::string_view b) : b_(b) {}
  bool U64(uint64_t* v) {
    if (b_.size() - pos_ < 8) return false;
    *v = 0;
    for (int i = 7; i >= 0; --i) *v = (*v << 8) | static_cast<unsigned char>(b_[pos_ + i]);
    pos_ += 8;
    return true;
  }
  bool String(std::string* s) {
    if (b_.size() - pos_ < 4) return false;
    uint32_t n = 0;
    for (int i = 3; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(b_[pos_ + i]);
    pos_ += 4;
    if (b_.size() - pos_ < n) return false;
    s->assign(b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t left() const { return b_.size() - pos_; }

 private:
  absl::string_view b_;
  size_t pos_ = 0;
};

bool Fits(const TfRecordIndex& index, const RandomAccessFile& shard, const std::string& image_key,
          const std::string& label_key) {
  return index.shard_size == shard.size() && index.shard_mtime_ns == shard.mtime_ns() &&
         index.image_key == image_key && index.label_key == label_key;
}

// The stored index at `path` when it is whole and fits the shard; nothing otherwise.
std::optional<TfRecordIndex> LoadFitting(const std::string& path, const RandomAccessFile& shard,
                                         const std::string& image_key,
                                         const std::string& label_key) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = RandomAccessFile::Open(path);
  std::string bytes;
  if (!file.ok() || !(*file)->Read(0, (*file)->size(), &bytes).ok()) return std::nullopt;
  absl::StatusOr<TfRecordIndex> index = ParseTfRecordIndex(bytes, path);
  if (!index.ok() || !Fits(*index, shard, image_key, label_key)) return std::nullopt;
  return *std::move(index);
}

}  // namespace

absl::StatusOr<TfRecordIndex> BuildTfRecordIndex(const RandomAccessFile& shard,
                                                 const std::string& image_key,
                                                 const std::string& label_key) {
  TfRecordIndex index{shard.size(), shard.mtime_ns(), image_key, label_key};
  SequentialReader reader(shard);
  const uint64_t size = shard.size();
  for (uint64_t offset = 0, r = 0; offset < size; ++r) {
    const auto at = [&] {
      return absl::StrCat(shard.name(), ": record ", r, " (at byte ", offset, ")");
    };
    if (size - offset < kTfRecordHeaderBytes + kTfRecordFooterBytes) {
      return absl::DataLossError(absl::StrCat(at(), ": truncated: ", size - offset,
                                              " bytes left, a record takes at least 16"));
    }
    ASSIGN_OR_RETURN(absl::string_view header, reader.Get(offset, kTfRecordHeaderBytes));
    uint64_t length = 0;
    if (!ParseTfRecordHeader(StdView(header), &length)) {
      return absl::DataLossError(
          absl::StrCat(at(), ": length CRC mismatch (corrupt, or not a TFRecord file)"));
    }
    const uint64_t left = size - offset - kTfRecordHeaderBytes - kTfRecordFooterBytes;
    if (length > left) {
      return absl::DataLossError(
          absl::StrCat(at(), ": truncated: its length says ", length, " bytes, ", left, " follow"));
    }
    ASSIGN_OR_RETURN(absl::string_view body,
                     reader.Get(offset + kTfRecordHeaderBytes, length + kTfRecordFooterBytes));
    const absl::string_view data = body.substr(0, length);
    if (!TfRecordDataCrcMatches(StdView(data), StdView(body.substr(length)))) {
      return absl::DataLossError(absl::StrCat(at(), ": data CRC mismatch (corrupt data)"));
    }
    absl::string_view image;
    int64_t label = 0;
    absl::Status parsed = ParseImageExample(data, image_key, label_key, &image, &label);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(at(), ": ", parsed.message()));
    }
    if (label < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          at(), ": label ", label, " is negative (labels are class indices in [0, classes))"));
    }
    if (index.offsets.size() >= kMaxIndexedRecords) {
      return absl::InvalidArgumentError(
          absl::StrCat(shard.name(), ": more than ", kMaxIndexedRecords, " records"));
    }
    index.offsets.push_back(offset);
    index.lengths.push_back(length);
    index.labels.push_back(label);
    offset += kTfRecordHeaderBytes + length + kTfRecordFooterBytes;
  }
  return index;
}

std::string SerializeTfRecordIndex(const TfRecordIndex& index) {
  std::string out(kIndexMagic, 8);
  Put64(index.shard_size, &out);
  Put64(static_cast<uint64_t>(index.shard_mtime_ns), &out);
  PutString(index.image_key, &out);
  PutString(index.label_key, &out);
  Put64(index.offsets.size(), &out);
  out.reserve(out.size() + index.offsets.size() * 24 + kDigestBytes);
  for (size_t i = 0; i < index.offsets.size(); ++i) {
    Put64(index.offsets[i], &out);
    Put64(index.lengths[i], &out);
    Put64(static_cast<uint64_t>(index.labels[i]), &out);
  }
  out += Sha256(out);
  return out;
}

absl::StatusOr<TfRecordIndex> ParseTfRecordIndex(const std::string& bytes,
                                                 const std::string& what) {
  const auto bad = [&](const char* why) {
    return absl::DataLossError(absl::StrCat(what, ": not a whole TFRecord index (", why, ")"));
  };
  if (bytes.size() < 8 + kDigestBytes || bytes.compare(0, 8, kIndexMagic) != 0) {
    return bad("no LSTFIDX1 magic");
  }
  const absl::string_view body(bytes.data(), bytes.size() - kDigestBytes);
  if (Sha256(body) != absl::string_view(bytes).substr(body.size())) return bad("digest mismatch");
  IndexReader r(body.substr(8));
  TfRecordIndex index;
  uint64_t mtime = 0, count = 0;
  if (!r.U64(&index.shard_size) || !r.U64(&mtime) || !r.String(&index.image_key) ||
      !r.String(&index.label_key) || !r.U64(&count) || count > r.left() / 24 ||
      r.left() != count * 24) {
    return bad("malformed header");
  }
  index.shard_mtime_ns = static_cast<int64_t>(mtime);
  index.offsets.resize(count);
  index.lengths.resize(count);
  index.labels.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t label = 0;
    r.U64(&index.offsets[i]);
    r.U64(&index.lengths[i]);
    r.U64(&label);
    index.labels[i] = static_cast<int64_t>(label);
  }
  return index;
}

std::string IndexPathBeside(const std::string& shard_path) {
  const std::filesystem::path p(shard_path);
  return (p.parent_path() / absl::StrCat(".", p.filename().string(), ".lockstep-index")).string();
}

std::string IndexPathInCache(const std::string& shard_path, const std::string& cache_dir) {
  const std::string hash = absl::BytesToHexString(Sha256(shard_path)).substr(0, 16);
  return absl::StrCat(cache_dir, "/", hash, "-",
                      std::filesystem::path(shard_path).filename().string(), ".lockstep-index");
}

absl::StatusOr<TfRecordIndex> LoadOrBuildTfRecordIndex(const RandomAccessFile& shard,
                                                       const std::string& image_key,
                                                       const std::string& label_key,
                                                       const std::string& cache_dir) {
  const std::string beside = IndexPathBeside(shard.path());
  const std::string cached = cache_dir.empty() ? "" : IndexPathInCache(shard.path(), cache_dir);
  for (const std::string& path : {beside, cached}) {
    if (path.empty()) continue;
    if (std::optional<TfRecordIndex> index = LoadFitting(path, shard, image_key, label_key)) {
      return *std::move(index);
    }
  }
  ASSIGN_OR_RETURN(TfRecordIndex index, BuildTfRecordIndex(shard, image_key, label_key));
  const std::string bytes = SerializeTfRecordIndex(index);
  absl::Status stored = WriteFileDurably(beside, {bytes});
  if (stored.ok()) return index;
  std::string why = absl::StrCat("beside it: ", stored.message());
  if (!cache_dir.empty()) {
    std::error_code ignored;
    std::filesystem::create_directories(cache_dir, ignored);
    absl::Status in_cache = WriteFileDurably(cached, {bytes});
    if (in_cache.ok()) return index;
    absl::StrAppend(&why, "; in the cache folder: ", in_cache.message());
  } else {
    absl::StrAppend(&why, "; and the worker has no cache folder for indexes");
  }
  return absl::FailedPreconditionError(
      absl::StrCat(shard.name(), ": its offset index cannot be stored (", why, ")"));
}

}  // namespace lockstep
