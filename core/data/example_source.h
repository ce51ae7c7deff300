// ExampleSource: random access to one split of a dataset as it is stored, example by
// example, for datasets a worker streams instead of holding (TFRecord shards, an image
// folder, a raw record file). Index i in [0, size()) is the dataset's own order (TFRecord
// shards by name and records in file order; an image folder's classes sorted by name and
// files by name within each; a record file's rows), the order the coordinator's
// permutation ranges over. A worker reads only the examples of its steps, through its data
// pipeline; nothing here holds the split in memory.
//
// Thread safety: Read and Where may be called from several threads at once.
#ifndef LOCKSTEP_CORE_DATA_EXAMPLE_SOURCE_H_
#define LOCKSTEP_CORE_DATA_EXAMPLE_SOURCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/data/data_roots.h"
#include "core/data/dataset.h"
#include "core/model.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

// One example as its source stores it.
struct StoredExample {
  // kEncoded: `bytes` is an image file (JPEG or PNG, told by its signature). kRaw: `bytes`
  // holds shape.size() uint8 pixels, HWC row-major.
  enum class Kind { kEncoded, kRaw };
  Kind kind = Kind::kEncoded;
  Dims shape;  // kRaw only
  std::string bytes;
  int64_t label = 0;
};

class ExampleSource {
 public:
  virtual ~ExampleSource() = default;

  virtual int64_t size() const = 0;
  // Every stored image's shape when the source fixes one (a raw record file); nullopt when
  // only decoding tells (encoded images).
  virtual std::optional<Dims> stored_shape() const = 0;
  // Example `index` into *out, reusing its buffers. INVALID_ARGUMENT for an index outside
  // [0, size()), a missing feature or one of the wrong type, a negative label; DATA_LOSS
  // for a CRC mismatch or a truncated record; FAILED_PRECONDITION for a file gone or changed
  // since the source was opened. Each message names Where(index) and the reason.
  virtual absl::Status Read(int64_t index, StoredExample* out) const = 0;
  // Where example `index` lives, for messages, e.g.
  // "/data/fm/fashion_mnist-train.tfrecord-00003-of-00016: record 1234".
  virtual std::string Where(int64_t index) const = 0;

  // The split's largest label and an example holding it, known without decoding (a
  // record file's labels, an image folder's classes, a TFRecord index), for the job-start
  // check against the model's classes: {-1, -1} for an empty split. Read returns the
  // same labels.
  struct MaxLabel {
    int64_t label = -1;
    int64_t index = -1;
  };
  virtual MaxLabel max_label() const = 0;
};

// What opening a source needs besides the spec.
struct SourceOptions {
  const DataRoots* roots = nullptr;  // paths must resolve inside them (null: any path)
  // A folder a worker may write index files to when it cannot write beside the shards
  // (empty: beside the shards, else fail naming the folder).
  std::string cache_dir;
};

// Whether `format` ("tfrecord", "imagefolder", "records") is one a worker streams.
bool IsStreamedFormat(const std::string& format);

// Opens `split` of the streamed dataset `spec` (validated: CheckDatasetSpec). Errors name
// the spec field and the file: INVALID_ARGUMENT for a path outside the roots or a malformed
// layout (no shards, a missing shard of a numbered set, an empty class folder),
// FAILED_PRECONDITION for a missing file or folder, DATA_LOSS for an index that does not
// match its shards.
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenExampleSource(const v1::DatasetSpec& spec,
                                                                 Split split,
                                                                 const SourceOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_EXAMPLE_SOURCE_H_
