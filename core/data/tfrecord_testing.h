// Writing TFRecord shards of tf.train.Example in tests (and in the cluster tests that
// stream them): TFDS's file names and framing, an image and a label per record.
#ifndef LOCKSTEP_CORE_DATA_TFRECORD_TESTING_H_
#define LOCKSTEP_CORE_DATA_TFRECORD_TESTING_H_

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/data/tf_example.h"
#include "core/io/tfrecord.h"

namespace lockstep::testing {

struct ImageRecord {
  std::string image;  // encoded bytes
  int64_t label = 0;
};

// One shard's bytes: each record a tf.train.Example of `image_key` and `label_key`.
inline std::string TfRecordShardBytes(const std::vector<ImageRecord>& records,
                                      const std::string& image_key = "image",
                                      const std::string& label_key = "label") {
  std::string out;
  for (const ImageRecord& r : records) {
    out += FrameTfRecord(ImageExampleBytes(image_key, r.image, label_key, r.label));
  }
  return out;
}

// TFDS's name of shard `i` of `n`: NAME-SPLIT.tfrecord-00003-of-00016.
inline std::string TfRecordShardName(const std::string& name, const std::string& split, int i,
                                     int n) {
  return absl::StrFormat("%s-%s.tfrecord-%05d-of-%05d", name, split, i, n);
}

// Writes `records` into `shards` shards of name-split in `dir`, record j into shard
// j * shards / records.size() (in order); returns the shards' paths.
inline std::vector<std::string> WriteTfRecordShards(const std::string& dir, const std::string& name,
                                                    const std::string& split,
                                                    const std::vector<ImageRecord>& records,
                                                    int shards) {
  std::vector<std::vector<ImageRecord>> parts(shards);
  for (size_t j = 0; j < records.size(); ++j)
    parts[j * shards / records.size()].push_back(records[j]);
  std::vector<std::string> paths;
  for (int i = 0; i < shards; ++i) {
    paths.push_back(dir + "/" + TfRecordShardName(name, split, i, shards));
    std::ofstream(paths.back(), std::ios::binary) << TfRecordShardBytes(parts[i]);
  }
  return paths;
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_CORE_DATA_TFRECORD_TESTING_H_
