// The tfrecord format's ExampleSource: TFDS's shards of one split,
// DIR/NAME-SPLIT.tfrecord-00000-of-00016 ... (or one DIR/NAME-SPLIT.tfrecord), each
// record a tf.train.Example with an encoded image (bytes) and a label (int64). Every shard
// has an offset index (core/data/tfrecord_index.h), so that example i is one pread, its
// framing and CRCs checked again, its Example parsed for the image. Index i runs over
// the shards in order, records in file order.
//
// Thread safety: as ExampleSource.
#ifndef LOCKSTEP_CORE_DATA_TFRECORD_SOURCE_H_
#define LOCKSTEP_CORE_DATA_TFRECORD_SOURCE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/example_source.h"

namespace lockstep {

// The shard files of `name`-`split` in `dir`, in order (file names only); messages call
// the folder `shown_dir` (the spec's dataset.path). INVALID_ARGUMENT naming dataset.path:
// none there, a numbered set with a shard missing (naming it) or of two different totals,
// both numbered shards and a single file; FAILED_PRECONDITION for a folder that cannot be
// listed.
absl::StatusOr<std::vector<std::string>> FindTfRecordShards(const std::string& dir,
                                                            const std::string& shown_dir,
                                                            const std::string& name,
                                                            const std::string& split);

// Opens split `split` of the shards of `spec` (validated), indexing shards that have no
// fitting index (SourceOptions::cache_dir). FindTfRecordShards' and the index's errors.
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTfRecordSource(const v1::DatasetSpec& spec,
                                                                  const std::string& split,
                                                                  const SourceOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_TFRECORD_SOURCE_H_
