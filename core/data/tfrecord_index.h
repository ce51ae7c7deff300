// The offset index of one TFRecord shard: where each record starts, its length and its
// label, so that a worker reads example i with one pread and knows every label (the
// job-start class check) without reading the shard again. Built once by reading the whole
// shard (every record's framing and both CRCs checked, every tf.train.Example parsed for
// its image and label), then stored, digest-sealed, beside the shard or in a cache folder.
// A stored index is used only when its digest holds and it was built from a shard of the
// same size and modification time with the same feature names; otherwise it is built
// again and replaced.
//
// The file, ".SHARD.lockstep-index" beside the shard (hidden: globs of the shards, such as
// "NAME-train.tfrecord*", leave it out), or "<16 hex digits of SHA-256 of the shard's
// path>-SHARD.lockstep-index" in a cache folder, little-endian: "LSTFIDX1", the shard's size (u64)
// and mtime in ns (i64), the image and label keys (u32 length + bytes each), the record
// count (u64), per record its offset, length (u64) and label (i64), then the SHA-256 of
// all that.
//
// Thread safety: plain functions; two processes indexing one shard at once each write
// a whole file (WriteFileDurably), the last rename wins, and both are the same index.
#ifndef LOCKSTEP_CORE_DATA_TFRECORD_INDEX_H_
#define LOCKSTEP_CORE_DATA_TFRECORD_INDEX_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/io/random_access_file.h"

namespace lockstep {

// Debian's abseil has its own string_view; core/io/tfrecord.h takes std's.
inline std::string_view StdView(absl::string_view s) { return {s.data(), s.size()}; }

struct TfRecordIndex {
  uint64_t shard_size = 0;
  int64_t shard_mtime_ns = 0;
  std::string image_key, label_key;
  std::vector<uint64_t> offsets;  // each record's first byte (its length field)
  std::vector<uint64_t> lengths;  // each record's data bytes
  std::vector<int64_t> labels;    // each >= 0
};

// Reads `shard` from start to end. DATA_LOSS naming the shard, the record and the byte
// offset for a truncated record or a CRC mismatch; INVALID_ARGUMENT for a record that is
// not a tf.train.Example of the two features, or a negative label.
absl::StatusOr<TfRecordIndex> BuildTfRecordIndex(const RandomAccessFile& shard,
                                                 const std::string& image_key,
                                                 const std::string& label_key);

std::string SerializeTfRecordIndex(const TfRecordIndex& index);
// DATA_LOSS naming `what` for a file that is not a whole, sealed index.
absl::StatusOr<TfRecordIndex> ParseTfRecordIndex(const std::string& bytes, const std::string& what);

// The shard's index: a stored one that fits (beside the shard, else in `cache_dir`), or
// one built now and stored beside the shard, else in `cache_dir` (made if missing).
// BuildTfRecordIndex's errors; FAILED_PRECONDITION naming the folders when it can be
// stored in neither (so that every worker does not read every shard on every start).
absl::StatusOr<TfRecordIndex> LoadOrBuildTfRecordIndex(const RandomAccessFile& shard,
                                                       const std::string& image_key,
                                                       const std::string& label_key,
                                                       const std::string& cache_dir);

// Where the index of `shard_path` is stored beside it, and in `cache_dir`.
std::string IndexPathBeside(const std::string& shard_path);
std::string IndexPathInCache(const std::string& shard_path, const std::string& cache_dir);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_TFRECORD_INDEX_H_
