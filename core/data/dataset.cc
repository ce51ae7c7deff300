// Dataset: an image-classification split in host memory, loaded from IDX or .npz files. Contract:
// dataset.h.
#include "core/data/dataset.h"

#include <sys/stat.h>

#include <cfloat>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/data/idx.h"
#include "core/data/token_dataset.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

constexpr int kClasses = 10;
constexpr size_t kMaxPathLength = 4096, kMaxKeyLength = 256;

absl::StatusOr<std::string> Find(const std::string& dir, const std::string& base,
                                 const DataRoots& roots) {
  struct stat st;
  for (const std::string& path :
       {absl::StrCat(dir, "/", base, ".gz"), absl::StrCat(dir, "/", base)}) {
    // Within roots a link counts as there even when dangling: Resolve then refuses a
    // link out of them alike whether or not its target exists.
    if ((roots.empty() ? ::stat : ::lstat)(path.c_str(), &st) == 0) {
      return roots.Resolve("dataset.path", path);
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("dataset: ", dir, "/", base, "[.gz]: no such file"));
}

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

std::string ShapeText(Dims d) { return absl::StrCat(d.h, "x", d.w, "x", d.c); }

bool SameShape(Dims a, Dims b) { return a.h == b.h && a.w == b.w && a.c == b.c; }

absl::Status CheckNormalization(const v1::Normalization& n, Dims input) {
  if (n.mean_size() != n.std_size()) {
    return Invalid("dataset.normalize",
                   absl::StrCat("mean has ", n.mean_size(), " values and std ", n.std_size(),
                                "; give one of each per channel"));
  }
  if (n.mean_size() == 0) return absl::OkStatus();
  if (n.mean_size() != input.c) {
    return Invalid("dataset.normalize.mean",
                   absl::StrCat(n.mean_size(), " values for the model's ", input.c,
                                " input channels (its input is ", ShapeText(input), ")"));
  }
  for (int i = 0; i < n.mean_size(); ++i) {
    if (!(std::fabs(n.mean(i)) <= FLT_MAX)) {
      return Invalid(absl::StrCat("dataset.normalize.mean[", i, "]"),
                     absl::StrCat(n.mean(i), " is not a finite float32"));
    }
    if (!(n.std(i) > 0 && n.std(i) <= FLT_MAX && static_cast<float>(n.std(i)) > 0)) {
      return Invalid(absl::StrCat("dataset.normalize.std[", i, "]"),
                     absl::StrCat(n.std(i), " is not a positive finite float32"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPaths(v1::DatasetSpec* ds, const DataRoots& roots) {
  for (const auto& [field, value] : {std::pair("dataset.train_path", &ds->train_path()),
                                     std::pair("dataset.test_path", &ds->test_path())}) {
    if (value->empty()) {
      return Invalid(field, absl::StrCat("required for format ", ds->format(), " (a file)"));
    }
    if (value->size() > kMaxPathLength) {
      return Invalid(field, absl::StrCat("longer than ", kMaxPathLength, " characters"));
    }
    RETURN_IF_ERROR(roots.CheckLexically(field, *value));
  }
  return absl::OkStatus();
}

// Formats text and tokens: the two files, the context (the model's input length), no
// image fields.
absl::Status CheckTokenDatasetSpec(v1::DatasetSpec* ds, Dims input, const DataRoots& roots) {
  for (const auto& [field, set] :
       {std::pair("dataset.path", !ds->path().empty()),
        std::pair("dataset.image_key", !ds->image_key().empty()),
        std::pair("dataset.label_key", !ds->label_key().empty()),
        std::pair("dataset.normalize", ds->has_normalize()),
        std::pair("dataset.token_key", ds->format() == "text" && !ds->token_key().empty())}) {
    if (set) {
      return Invalid(field, absl::StrCat("not read by format ", ds->format(),
                                         " (it reads dataset.train_path, dataset.test_path and "
                                         "dataset.context",
                                         ds->format() == "tokens" ? ", dataset.token_key)" : ")"));
    }
  }
  RETURN_IF_ERROR(CheckPaths(ds, roots));
  if (ds->context() == 0 || ds->context() > (1u << 20)) {
    return Invalid("dataset.context",
                   absl::StrCat(ds->context(), " is not in [1, 1048576] (tokens per example)"));
  }
  if (!input.flat || input.c != static_cast<int>(ds->context())) {
    return Invalid("model.input_shape",
                   absl::StrCat(DimsString(input),
                                " does not take windows of dataset.context = ", ds->context(),
                                " tokens: write input_shape: [", ds->context(), "]"));
  }
  if (ds->format() == "tokens") {
    if (ds->token_key().empty()) ds->set_token_key("tokens");
    if (ds->token_key().size() > kMaxKeyLength) {
      return Invalid("dataset.token_key",
                     absl::StrCat("longer than ", kMaxKeyLength, " characters"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Dataset> LoadIdxDataset(const std::string& dir, Split split, uint64_t max_bytes,
                                       const DataRoots& roots) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  ASSIGN_OR_RETURN(std::string image_path, Find(dir, prefix + "-images-idx3-ubyte", roots));
  ASSIGN_OR_RETURN(std::string label_path, Find(dir, prefix + "-labels-idx1-ubyte", roots));
  ASSIGN_OR_RETURN(IdxArray images, ReadIdx(image_path, 3, max_bytes));
  ASSIGN_OR_RETURN(IdxArray labels, ReadIdx(label_path, 1, max_bytes));
  if (images.dims[0] != labels.dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat(image_path, " has ", images.dims[0],
                                                   " images but ", label_path, " has ",
                                                   labels.dims[0], " labels"));
  }
  Dataset ds;
  ds.size = images.dims[0];
  ds.row = images.dims[1] * images.dims[2];
  if (images.dims[1] != 28 || images.dims[2] != 28) {
    return absl::InvalidArgumentError(absl::StrCat(image_path, ": images are ", images.dims[1], "x",
                                                   images.dims[2], ", expected 28x28"));
  }
  ds.shape = {28, 28, 1};
  ds.field = "dataset.path";
  ds.images_from = image_path;
  ds.labels_from = label_path;
  ds.images.resize(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) {
    ds.images[i] = static_cast<float>(images.data[i]) / 255.0f;
  }
  ds.labels.resize(ds.size);
  for (int64_t i = 0; i < ds.size; ++i) {
    if (labels.data[i] >= kClasses) {
      return absl::InvalidArgumentError(absl::StrCat(label_path, ": label ", int{labels.data[i]},
                                                     " at index ", i, " is not in [0, 10)"));
    }
    ds.labels[i] = labels.data[i];
    if (ds.labels[i] > ds.labels[ds.max_label_index]) ds.max_label_index = i;
  }
  return ds;
}

absl::StatusOr<Datasets> LoadDatasets(const v1::DatasetSpec& spec, const DataRoots& roots,
                                      uint64_t max_bytes) {
  Datasets d;
  if (spec.format() == "text" || spec.format() == "tokens") {
    const int context = static_cast<int>(spec.context());
    for (auto [split, field, path] :
         {std::tuple(&d.train, "dataset.train_path", &spec.train_path()),
          std::tuple(&d.test, "dataset.test_path", &spec.test_path())}) {
      if (spec.format() == "text") {
        ASSIGN_OR_RETURN(*split, LoadTextDataset(*path, field, context, max_bytes, roots));
      } else {
        ASSIGN_OR_RETURN(
            *split, LoadTokenNpzDataset(*path, field, spec.token_key(), context, max_bytes, roots));
      }
    }
    return d;  // same shape ([context]) by construction; no normalization
  }
  if (spec.format() == "npz") {
    ASSIGN_OR_RETURN(d.train, LoadNpzDataset(spec.train_path(), "dataset.train_path",
                                             spec.image_key(), spec.label_key(), max_bytes, roots));
    ASSIGN_OR_RETURN(d.test, LoadNpzDataset(spec.test_path(), "dataset.test_path", spec.image_key(),
                                            spec.label_key(), max_bytes, roots));
  } else {
    ASSIGN_OR_RETURN(d.train, LoadIdxDataset(spec.path(), Split::kTrain, max_bytes, roots));
    ASSIGN_OR_RETURN(d.test, LoadIdxDataset(spec.path(), Split::kTest, max_bytes, roots));
  }
  if (!SameShape(d.train.shape, d.test.shape)) {
    return Invalid(d.test.field, absl::StrCat(d.test.images_from, ": images are ",
                                              ShapeText(d.test.shape), ", the training split's (",
                                              d.train.images_from, ") ", ShapeText(d.train.shape)));
  }
  RETURN_IF_ERROR(Normalize(spec.normalize(), &d.train));
  RETURN_IF_ERROR(Normalize(spec.normalize(), &d.test));
  return d;
}

absl::Status Normalize(const v1::Normalization& norm, Dataset* ds) {
  if (norm.mean_size() == 0 && norm.std_size() == 0) return absl::OkStatus();
  const int c = ds->shape.c;
  if (norm.mean_size() != c || norm.std_size() != c) {
    return Invalid("dataset.normalize",
                   absl::StrCat(norm.mean_size(), " means and ", norm.std_size(),
                                " stds for images of ", c, " channels (", ds->images_from, ")"));
  }
  std::vector<float> mean(c), std(c);
  for (int i = 0; i < c; ++i) {
    mean[i] = static_cast<float>(norm.mean(i));
    std[i] = static_cast<float>(norm.std(i));
  }
  const size_t n = ds->images.size();
  for (size_t i = 0; i < n; i += c) {
    for (int k = 0; k < c; ++k) ds->images[i + k] = (ds->images[i + k] - mean[k]) / std[k];
  }
  return absl::OkStatus();
}

absl::Status CheckDatasetSpec(v1::DatasetSpec* ds, Dims input, const DataRoots& roots) {
  if (ds->format().empty()) ds->set_format("idx");
  const bool tokens = ds->format() == "text" || ds->format() == "tokens";
  if (!tokens && (ds->context() != 0 || !ds->token_key().empty())) {
    return Invalid(ds->context() != 0 ? "dataset.context" : "dataset.token_key",
                   "only for formats text and tokens (sequence models)");
  }
  if (tokens) return CheckTokenDatasetSpec(ds, input, roots);
  if (ds->format() == "idx") {
    for (const auto& [field, value] :
         {std::pair("train_path", &ds->train_path()), std::pair("test_path", &ds->test_path()),
          std::pair("image_key", &ds->image_key()), std::pair("label_key", &ds->label_key())}) {
      if (!value->empty()) {
        return Invalid(absl::StrCat("dataset.", field),
                       "only for format npz (dataset.format: npz); format idx reads dataset.path");
      }
    }
    if (ds->name().empty()) ds->set_name("fashion_mnist");
    if (ds->path().empty()) {
      if (ds->name() != "fashion_mnist") {
        return Invalid("dataset.path", absl::StrCat("required for dataset \"", ds->name(), "\""));
      }
      ds->set_path(kDefaultDatasetPath);
    }
    RETURN_IF_ERROR(roots.CheckLexically("dataset.path", ds->path()));
  } else if (ds->format() == "npz") {
    if (!ds->path().empty()) {
      return Invalid("dataset.path",
                     "format npz reads dataset.train_path and dataset.test_path, not a folder");
    }
    for (const auto& [field, value] : {std::pair("dataset.train_path", &ds->train_path()),
                                       std::pair("dataset.test_path", &ds->test_path())}) {
      if (value->empty()) return Invalid(field, "required for format npz (a .npz file)");
      if (value->size() > kMaxPathLength) {
        return Invalid(field, absl::StrCat("longer than ", kMaxPathLength, " characters"));
      }
      RETURN_IF_ERROR(roots.CheckLexically(field, *value));
    }
    if (ds->image_key().empty()) ds->set_image_key("image");
    if (ds->label_key().empty()) ds->set_label_key("label");
    if (ds->image_key().size() > kMaxKeyLength || ds->label_key().size() > kMaxKeyLength) {
      return Invalid(
          ds->image_key().size() > kMaxKeyLength ? "dataset.image_key" : "dataset.label_key",
          absl::StrCat("longer than ", kMaxKeyLength, " characters"));
    }
    if (ds->image_key() == ds->label_key()) {
      return Invalid("dataset.label_key",
                     absl::StrCat("\"", ds->label_key(), "\" is also dataset.image_key"));
    }
  } else {
    return Invalid("dataset.format",
                   absl::StrCat("unknown format \"", ds->format(),
                                "\" (expected \"idx\", \"npz\", \"text\" or \"tokens\")"));
  }
  return CheckNormalization(ds->normalize(), input);
}

absl::Status CheckDatasetFitsModel(const Dataset& ds, Dims input, int classes) {
  if (ds.label_row != 1) {
    return Invalid(ds.field, absl::StrCat(ds.labels_from, ": ", ds.label_row,
                                          " targets per example (a token dataset): the model "
                                          "must give one prediction per position"));
  }
  if (!SameShape(ds.shape, input)) {
    return Invalid(ds.field, absl::StrCat(ds.images_from, ": images are ", ShapeText(ds.shape),
                                          " (HxWxC), the model takes ", ShapeText(input),
                                          ": model.input_shape must be the images'"));
  }
  if (ds.size > 0 && ds.labels[ds.max_label_index] >= classes) {
    return Invalid(ds.field,
                   absl::StrCat(ds.labels_from, ": label ", ds.labels[ds.max_label_index],
                                " at index ", ds.max_label_index, " is not in [0, ", classes,
                                "): the model's last layer has ", classes,
                                " outputs (model.layers' last dense features, or the preset's)"));
  }
  return absl::OkStatus();
}

absl::Status CheckDatasetFitsModel(const Dataset& ds, const Model& model) {
  const int positions = model.positions(), vocabulary = model.vocabulary();
  if (vocabulary > 0 && ds.max_token < 0) {
    return Invalid(ds.field, absl::StrCat(ds.images_from,
                                          ": images, but the model starts with "
                                          "an embed layer: it takes a token "
                                          "dataset (format text or tokens)"));
  }
  if (vocabulary > 0 && ds.max_token >= vocabulary) {
    return Invalid(
        ds.field, absl::StrCat(ds.images_from, ": token ", ds.max_token, " is not in [0, ",
                               vocabulary, "): the model's embed has num_embeddings ", vocabulary));
  }
  if (positions == 1) return CheckDatasetFitsModel(ds, model.input(), model.num_classes());
  if (ds.label_row != positions) {
    return Invalid(ds.field,
                   absl::StrCat(ds.labels_from, ": ", ds.label_row,
                                " targets per example, but the model predicts ", positions,
                                " positions (its output is ", DimsString(model.Last()), ")"));
  }
  if (!SameShape(ds.shape, model.input())) {
    return Invalid(ds.field, absl::StrCat(ds.images_from, ": examples are ", DimsString(ds.shape),
                                          ", the model takes ", DimsString(model.input())));
  }
  const int classes = model.num_classes();
  if (ds.size > 0 && ds.labels[ds.max_label_index] >= classes) {
    return Invalid(ds.field, absl::StrCat(ds.labels_from, ": target ",
                                          ds.labels[ds.max_label_index], " is not in [0, ", classes,
                                          "): the model's last layer has ", classes, " outputs"));
  }
  return absl::OkStatus();
}

std::string DatasetLocation(const v1::DatasetSpec& spec) {
  if (spec.format() != "idx" && !spec.format().empty()) {
    return absl::StrCat(spec.train_path(), " and ", spec.test_path());
  }
  return spec.path();
}

}  // namespace lockstep
