// The image and the label of a serialized tf.train.Example, read straight off the
// protobuf wire format: Example{features: Features{map<string, Feature> feature}},
// Feature{oneof bytes_list | float_list | int64_list}. Only the two named features are
// looked at, and the image comes back as a view into the record, so that a reader copies
// no bytes it does not need (a generated Example message would copy every feature and
// build its map). Wire-format rules as protobuf's: unknown fields are skipped, a map's
// later entry for a key replaces an earlier one, the last of a oneof's fields wins, and
// an int64_list may be packed or not.
//
// Thread safety: pure functions.
#ifndef LOCKSTEP_CORE_DATA_TF_EXAMPLE_H_
#define LOCKSTEP_CORE_DATA_TF_EXAMPLE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace lockstep {

// From `record` (one TFRecord's data): *image, the one value of the bytes_list feature
// `image_key`, and *label, the one value of the int64_list feature `label_key`.
// INVALID_ARGUMENT saying why: not a tf.train.Example (a malformed wire format), a feature
// missing (listing some present), of another type, or with other than one value.
absl::Status ParseImageExample(absl::string_view record, absl::string_view image_key,
                               absl::string_view label_key, absl::string_view* image,
                               int64_t* label);

// Serializes a tf.train.Example of those two features, as TensorFlow writes it (for
// tests and tools).
std::string ImageExampleBytes(absl::string_view image_key, absl::string_view image,
                              absl::string_view label_key, int64_t label);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_TF_EXAMPLE_H_
