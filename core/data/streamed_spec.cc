// A streamed dataset's spec: its checks at submit and the plain values the sources read
// out of it. Contract: streamed_spec.h.
#include "core/data/streamed_spec.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

constexpr uint32_t kMaxSide = 16384;       // pixels, any crop or resize
constexpr uint32_t kMaxPadding = 4096;     // a random crop's, per side
constexpr int kMaxSteps = 32;              // preprocessing steps per split
constexpr size_t kMaxStreamedPath = 4096;  // characters
constexpr size_t kMaxStreamedName = 256;   // a name, a split, a feature

absl::Status StreamedInvalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// Which fields each streamed format reads, for the message refusing another.
const char* ReadsWhat(const std::string& format) {
  if (format == "tfrecord") {
    return "format tfrecord reads dataset.path (the shards' folder), dataset.name, "
           "dataset.train_split, dataset.test_split, dataset.image_key and dataset.label_key";
  }
  if (format == "imagefolder") {
    return "format imagefolder reads dataset.train_path and dataset.test_path (folders of "
           "one subfolder per class)";
  }
  return "format records reads dataset.train_path and dataset.test_path (.npy files of uint8 "
         "[N, H, W, C] with their labels in .labels.npy beside them)";
}

absl::Status CheckNameField(const std::string& field, const std::string& value) {
  if (value.size() > kMaxStreamedName) {
    return StreamedInvalid(field, absl::StrCat("longer than ", kMaxStreamedName, " characters"));
  }
  if (absl::StrContains(value, '/') || absl::StrContains(value, '\0')) {
    return StreamedInvalid(field, absl::StrCat("\"", value, "\" holds a '/' (a name, not a path)"));
  }
  return absl::OkStatus();
}

absl::Status CheckStreamedPath(const std::string& field, const std::string& value,
                               const std::string& format, const DataRoots& roots) {
  if (value.empty()) return StreamedInvalid(field, absl::StrCat("required: ", ReadsWhat(format)));
  if (value.size() > kMaxStreamedPath) {
    return StreamedInvalid(field, absl::StrCat("longer than ", kMaxStreamedPath, " characters"));
  }
  return roots.CheckLexically(field, value);
}

// The fields of tfrecord against those of imagefolder and records.
absl::Status CheckLayout(v1::DatasetSpec* ds, const DataRoots& roots) {
  const std::string& format = ds->format();
  if (format == "tfrecord") {
    for (const auto& [field, value] : {std::pair("dataset.train_path", &ds->train_path()),
                                       std::pair("dataset.test_path", &ds->test_path())}) {
      if (!value->empty()) return StreamedInvalid(field, ReadsWhat(format));
    }
    RETURN_IF_ERROR(CheckStreamedPath("dataset.path", ds->path(), format, roots));
    if (ds->name().empty()) {
      return StreamedInvalid("dataset.name",
                             "required for format tfrecord: the dataset's name in its shards' "
                             "file names (NAME-train.tfrecord-00000-of-00016)");
    }
    if (ds->train_split().empty()) ds->set_train_split("train");
    if (ds->test_split().empty()) ds->set_test_split("test");
    if (ds->image_key().empty()) ds->set_image_key("image");
    if (ds->label_key().empty()) ds->set_label_key("label");
    for (const auto& [field, value] : {std::pair("dataset.name", &ds->name()),
                                       std::pair("dataset.train_split", &ds->train_split()),
                                       std::pair("dataset.test_split", &ds->test_split()),
                                       std::pair("dataset.image_key", &ds->image_key()),
                                       std::pair("dataset.label_key", &ds->label_key())}) {
      RETURN_IF_ERROR(CheckNameField(field, *value));
    }
    if (ds->image_key() == ds->label_key()) {
      return StreamedInvalid("dataset.label_key",
                             absl::StrCat("\"", ds->label_key(), "\" is also dataset.image_key"));
    }
    if (ds->train_split() == ds->test_split()) {
      return StreamedInvalid("dataset.test_split", absl::StrCat("\"", ds->test_split(),
                                                                "\" is also dataset.train_split"));
    }
    return absl::OkStatus();
  }
  for (const auto& [field, value] :
       {std::pair("dataset.path", &ds->path()), std::pair("dataset.image_key", &ds->image_key()),
        std::pair("dataset.label_key", &ds->label_key()),
        std::pair("dataset.train_split", &ds->train_split()),
        std::pair("dataset.test_split", &ds->test_split())}) {
    if (!value->empty()) return StreamedInvalid(field, ReadsWhat(format));
  }
  for (const auto& [field, value] : {std::pair("dataset.train_path", &ds->train_path()),
                                     std::pair("dataset.test_path", &ds->test_path())}) {
    RETURN_IF_ERROR(CheckStreamedPath(field, *value, format, roots));
    if (format == "records" && !absl::EndsWith(*value, ".npy")) {
      return StreamedInvalid(field, absl::StrCat("\"", *value,
                                                 "\" is not a .npy file (format records: uint8 "
                                                 "[N, H, W, C], labels in NAME.labels.npy)"));
    }
  }
  if (ds->train_path() == ds->test_path()) {
    return StreamedInvalid("dataset.test_path",
                           absl::StrCat("\"", ds->test_path(), "\" is also dataset.train_path"));
  }
  return absl::OkStatus();
}

template <typename Crop>
absl::Status CheckCropSize(const std::string& field, const Crop& crop) {
  const bool square = crop.size() > 0, sides = crop.height() > 0 || crop.width() > 0;
  if (square == sides || (sides && (crop.height() == 0 || crop.width() == 0))) {
    return StreamedInvalid(field, "set either size (a square) or both height and width");
  }
  const CropSize s = CropSizeOf(crop);
  if (static_cast<uint32_t>(s.height) > kMaxSide || static_cast<uint32_t>(s.width) > kMaxSide) {
    return StreamedInvalid(
        field, absl::StrCat(s.height, "x", s.width, " is over ", kMaxSide, " pixels on a side"));
  }
  return absl::OkStatus();
}

absl::Status CheckRange(const std::string& field, const google::protobuf::RepeatedField<double>& r,
                        double lowest, double highest, const char* what) {
  if (r.empty()) return absl::OkStatus();
  if (r.size() != 2) {
    return StreamedInvalid(field, absl::StrCat(r.size(), " values: give [min, max] of ", what));
  }
  if (!(r[0] > lowest && r[0] <= r[1] && r[1] <= highest)) {
    return StreamedInvalid(field, absl::StrCat("[", r[0], ", ", r[1], "] is not a range of ", what,
                                               " with ", lowest, " < min <= max <= ", highest));
  }
  return absl::OkStatus();
}

absl::Status CheckStep(const std::string& field, const v1::Preprocess& step, bool train) {
  switch (step.op_case()) {
    case v1::Preprocess::OP_NOT_SET:
      return StreamedInvalid(field,
                             "set one of resize, center_crop, random_crop, random_resized_crop, "
                             "horizontal_flip");
    case v1::Preprocess::kResize:
      if (step.resize().shorter_side() == 0 || step.resize().shorter_side() > kMaxSide) {
        return StreamedInvalid(
            absl::StrCat(field, ".resize.shorter_side"),
            absl::StrCat(step.resize().shorter_side(), " is not in [1, ", kMaxSide, "]"));
      }
      return absl::OkStatus();
    case v1::Preprocess::kCenterCrop:
      return CheckCropSize(absl::StrCat(field, ".center_crop"), step.center_crop());
    default:
      break;
  }
  if (!train) {
    return StreamedInvalid(field,
                           "a random step: the test split takes resize and center_crop only (the "
                           "training split's steps go in dataset.preprocess)");
  }
  switch (step.op_case()) {
    case v1::Preprocess::kRandomCrop:
      RETURN_IF_ERROR(CheckCropSize(absl::StrCat(field, ".random_crop"), step.random_crop()));
      if (step.random_crop().padding() > kMaxPadding) {
        return StreamedInvalid(
            absl::StrCat(field, ".random_crop.padding"),
            absl::StrCat(step.random_crop().padding(), " is over ", kMaxPadding));
      }
      return absl::OkStatus();
    case v1::Preprocess::kRandomResizedCrop: {
      const v1::RandomResizedCrop& c = step.random_resized_crop();
      const std::string f = absl::StrCat(field, ".random_resized_crop");
      RETURN_IF_ERROR(CheckCropSize(f, c));
      RETURN_IF_ERROR(CheckRange(f + ".scale", c.scale(), 0, 1, "the area fraction"));
      return CheckRange(f + ".ratio", c.ratio(), 0, 1e6, "the aspect ratio (width / height)");
    }
    case v1::Preprocess::kHorizontalFlip: {
      const double p = FlipProbability(step.horizontal_flip());
      if (!(p >= 0 && p <= 1)) {
        return StreamedInvalid(absl::StrCat(field, ".horizontal_flip.probability"),
                               absl::StrCat(p, " is not in [0, 1]"));
      }
      return absl::OkStatus();
    }
    default:
      return StreamedInvalid(field, "an unknown step");
  }
}

}  // namespace

absl::Status CheckStreamedDatasetSpec(v1::DatasetSpec* ds, Dims input, const DataRoots& roots) {
  RETURN_IF_ERROR(CheckLayout(ds, roots));
  if (input.flat || input.seq) {
    return StreamedInvalid(
        "model.input_shape",
        absl::StrCat(DimsString(input), ": format ", ds->format(), " gives images, [H, W, C]"));
  }
  if (ds->format() != "records" && input.c != 1 && input.c != 3) {
    return StreamedInvalid("model.input_shape",
                           absl::StrCat(DimsString(input), ": format ", ds->format(),
                                        " decodes images to 1 channel (gray) or 3 (RGB)"));
  }
  for (bool train : {true, false}) {
    const char* name = train ? "dataset.preprocess" : "dataset.test_preprocess";
    const auto& steps = StepsOf(*ds, train);
    if (steps.size() > kMaxSteps) {
      return StreamedInvalid(name, absl::StrCat(steps.size(), " steps (at most ", kMaxSteps, ")"));
    }
    for (int i = 0; i < steps.size(); ++i) {
      RETURN_IF_ERROR(CheckStep(absl::StrCat(name, "[", i, "]"), steps[i], train));
    }
    const std::optional<CropSize> out = FixedOutputSize(steps);
    if (out && (out->height != input.h || out->width != input.w)) {
      return StreamedInvalid(name, absl::StrCat("the steps end in ", out->height, "x", out->width,
                                                " images, but the model takes ", DimsString(input),
                                                " (model.input_shape)"));
    }
  }
  return absl::OkStatus();
}

ResizedCropRanges RangesOf(const v1::RandomResizedCrop& crop) {
  ResizedCropRanges r{0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0};
  if (crop.scale_size() == 2) r.scale_min = crop.scale(0), r.scale_max = crop.scale(1);
  if (crop.ratio_size() == 2) r.ratio_min = crop.ratio(0), r.ratio_max = crop.ratio(1);
  return r;
}

double FlipProbability(const v1::HorizontalFlip& flip) {
  return flip.has_probability() ? flip.probability() : 0.5;
}

const google::protobuf::RepeatedPtrField<v1::Preprocess>& StepsOf(const v1::DatasetSpec& spec,
                                                                  bool train) {
  return train ? spec.preprocess() : spec.test_preprocess();
}

std::optional<CropSize> FixedOutputSize(
    const google::protobuf::RepeatedPtrField<v1::Preprocess>& steps) {
  std::optional<CropSize> size;
  for (const v1::Preprocess& step : steps) {
    switch (step.op_case()) {
      case v1::Preprocess::kResize:
        size.reset();
        break;
      case v1::Preprocess::kCenterCrop:
        size = CropSizeOf(step.center_crop());
        break;
      case v1::Preprocess::kRandomCrop:
        size = CropSizeOf(step.random_crop());
        break;
      case v1::Preprocess::kRandomResizedCrop:
        size = CropSizeOf(step.random_resized_crop());
        break;
      default:
        break;
    }
  }
  return size;
}

std::string RecordLabelsPath(const std::string& images_path) {
  std::string stem = images_path;
  if (absl::EndsWith(stem, ".npy")) stem.resize(stem.size() - 4);
  return absl::StrCat(stem, ".labels.npy");
}

}  // namespace lockstep
