// The spec of a streamed dataset (formats tfrecord, imagefolder, records): its checks at
// submit, and the plain values the sources and ImageTransform read out of it (a crop's
// size, the default scale and ratio of a random resized crop, where a record file's labels
// are). docs/datasets.md describes the fields.
//
// Thread safety: plain functions.
#ifndef LOCKSTEP_CORE_DATA_STREAMED_SPEC_H_
#define LOCKSTEP_CORE_DATA_STREAMED_SPEC_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/data/data_roots.h"
#include "core/model.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

// Checks a spec whose format is streamed and fills its defaults (tfrecord: the splits
// "train" and "test", the features "image" and "label"). `input` is the model's input
// shape. INVALID_ARGUMENT naming the field: a missing or foreign path or key, a path
// outside `roots`, a preprocessing step without exactly one op or with a bad size, scale,
// ratio or probability, a random step in test_preprocess, a flat model input, images the
// steps end in that are not the model's input. Not dataset.normalize (CheckDatasetSpec).
absl::Status CheckStreamedDatasetSpec(v1::DatasetSpec* spec, Dims input, const DataRoots& roots);

// The height and width a crop asks for: `size` for both, else `height` and `width`.
struct CropSize {
  int height = 0, width = 0;
};
template <typename Crop>
CropSize CropSizeOf(const Crop& crop) {
  if (crop.size() > 0) return {static_cast<int>(crop.size()), static_cast<int>(crop.size())};
  return {static_cast<int>(crop.height()), static_cast<int>(crop.width())};
}

// A random resized crop's area fraction and aspect-ratio ranges, defaults filled
// ([0.08, 1] and [3/4, 4/3], torchvision's).
struct ResizedCropRanges {
  double scale_min, scale_max, ratio_min, ratio_max;
};
ResizedCropRanges RangesOf(const v1::RandomResizedCrop& crop);

// A horizontal flip's probability (default 0.5).
double FlipProbability(const v1::HorizontalFlip& flip);

// The steps a split's images go through: preprocess (train) or test_preprocess.
const google::protobuf::RepeatedPtrField<v1::Preprocess>& StepsOf(const v1::DatasetSpec& spec,
                                                                  bool train);

// The image size `steps` end in whatever the image's (the last crop's), or nullopt when
// it depends on the image (no crop, or a resize after the last one).
std::optional<CropSize> FixedOutputSize(
    const google::protobuf::RepeatedPtrField<v1::Preprocess>& steps);

// A record file's labels: "DIR/train.npy" -> "DIR/train.labels.npy".
std::string RecordLabelsPath(const std::string& images_path);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_STREAMED_SPEC_H_
