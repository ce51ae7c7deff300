// Loading a Dataset (core/data/host_dataset.h: a split in host memory, float32 images and
// int32 labels) from IDX files (Fashion-MNIST by default) or from the user's .npz files
// (docs/datasets.md): images scaled by 1/255 when stored as uint8, kept as they are when
// float32, then optionally normalized per channel. Token datasets for sequence models
// (formats text and tokens) load in core/data/token_dataset.h.
#ifndef LOCKSTEP_CORE_DATA_DATASET_H_
#define LOCKSTEP_CORE_DATA_DATASET_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/data_roots.h"
#include "core/data/host_dataset.h"
#include "core/model.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

inline constexpr char kDefaultDatasetPath[] = "/usr/share/datasets/fashion-mnist";

struct Datasets {
  Dataset train, test;
};

enum class Split { kTrain, kTest };

// Loads `dir`/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (the .gz preferred).
// Errors name the file: FAILED_PRECONDITION when a file is missing, INVALID_ARGUMENT or
// DATA_LOSS when one is malformed, or when images and labels disagree in count. With
// `roots`, each file must resolve inside them too (a link out of a root:
// DataRoots::Resolve's INVALID_ARGUMENT naming dataset.path); `dir` is checked already.
// No size limit by default (ReadIdx): the worker's memory budget is the limit.
absl::StatusOr<Dataset> LoadIdxDataset(const std::string& dir, Split split,
                                       uint64_t max_bytes = std::numeric_limits<uint64_t>::max(),
                                       const DataRoots& roots = {});

// Loads one split from a .npz file: `image_key` [N, H, W, C] uint8 or float32 (finite),
// `label_key` [N] of an integer dtype, each label >= 0. `field` is the spec field that
// names `path` (dataset.train_path). Errors name the field, the file and the array:
// INVALID_ARGUMENT naming the field for a path outside `roots` (alike whether or not it
// exists), FAILED_PRECONDITION for a missing file, INVALID_ARGUMENT for a missing array
// (listing those present), a wrong rank, dtype or count, a negative label or a NaN or
// infinite pixel, DATA_LOSS or INVALID_ARGUMENT for a corrupt or truncated file (NpzFile).
absl::StatusOr<Dataset> LoadNpzDataset(const std::string& path, const std::string& field,
                                       const std::string& image_key, const std::string& label_key,
                                       uint64_t max_bytes = uint64_t{1} << 31,
                                       const DataRoots& roots = {});

// Both splits as `spec` (validated: CheckDatasetSpec) says, normalized. INVALID_ARGUMENT
// besides the loaders' errors when the splits' images differ in shape, or the
// normalization's channels differ from theirs, or for a streamed format (tfrecord,
// imagefolder, records: OpenExampleSource reads those). `max_bytes` limits an NPZ array
// and a text or token file; IDX files have none.
absl::StatusOr<Datasets> LoadDatasets(const v1::DatasetSpec& spec, const DataRoots& roots = {},
                                      uint64_t max_bytes = uint64_t{1} << 31);

// x = (x - mean[c]) / std[c] in float32 over every pixel of channel c, mean and std
// rounded to float32 first. INVALID_ARGUMENT naming dataset.normalize unless both have
// one value per channel.
absl::Status Normalize(const v1::Normalization& norm, Dataset* ds);

// Checks a dataset spec and fills its defaults (format "idx", the IDX folder, the npz
// keys). `input` is the model's input shape (for normalize's channel count). INVALID_ARGUMENT
// naming the field: an unknown format, a field the format does not read, a missing
// path, a path outside `roots` (DataRoots::CheckLexically), a bad normalization.
absl::Status CheckDatasetSpec(v1::DatasetSpec* spec, Dims input, const DataRoots& roots);

// Whether a model with input shape `input` and `classes` outputs can train on `ds`: its
// images are that shape and its labels are in [0, classes). INVALID_ARGUMENT naming the
// spec field, the file and the array otherwise.
absl::Status CheckDatasetFitsModel(const Dataset& ds, Dims input, int classes);
// The same for `model`, and besides: a model whose first layer is an embed takes token
// datasets only, with tokens in [0, num_embeddings); a model giving one prediction per
// position (Model::positions() > 1) needs as many targets per example (label_row).
absl::Status CheckDatasetFitsModel(const Dataset& ds, const Model& model);

// How a spec's dataset is named in messages: its IDX folder, its two files or folders,
// or its TFRecord shards' pattern.
std::string DatasetLocation(const v1::DatasetSpec& spec);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_DATASET_H_
