// Fuzzes a TFRecord shard of tf.train.Example as a worker reads one (core/data/
// tfrecord_index.h, tf_example.h): the index pass over the whole file (framing, both
// CRCs, every Example parsed), the index's own file format round trip and parser, and
// the Example parser on the raw input. Every record the index accepted must parse again
// at its offset.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/data/tf_example.h"
#include "core/data/tfrecord_index.h"
#include "core/io/random_access_file.h"
#include "core/io/tfrecord.h"
#include "tests/fuzz/memory_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::string_view image;
  int64_t label = 0;
  (void)ParseImageExample(bytes, "image", "label", &image, &label);
  (void)ParseTfRecordIndex(bytes, "fuzz");

  auto file = RandomAccessFile::Open(fuzz::MemoryFile(data, size));
  if (!file.ok()) std::abort();
  absl::StatusOr<TfRecordIndex> index = BuildTfRecordIndex(**file, "image", "label");
  if (!index.ok()) return 0;
  absl::StatusOr<TfRecordIndex> again =
      ParseTfRecordIndex(SerializeTfRecordIndex(*index), "round trip");
  if (!again.ok() || again->offsets != index->offsets || again->labels != index->labels) {
    std::abort();
  }
  for (size_t r = 0; r < index->offsets.size(); ++r) {
    const uint64_t at = index->offsets[r] + kTfRecordHeaderBytes, n = index->lengths[r];
    if (at + n + kTfRecordFooterBytes > size) std::abort();
    if (!ParseImageExample(bytes.substr(at, n), "image", "label", &image, &label).ok() ||
        label != index->labels[r] || label < 0) {
      std::abort();
    }
  }
  return 0;
}
