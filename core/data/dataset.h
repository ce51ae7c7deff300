// Dataset: an image-classification split (Fashion-MNIST by default) loaded from IDX
// files into float32 images scaled by 1/255 and int32 labels.
#ifndef LOCKSTEP_CORE_DATA_DATASET_H_
#define LOCKSTEP_CORE_DATA_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/data_roots.h"

namespace lockstep {

inline constexpr char kDefaultDatasetPath[] = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  int64_t size = 0;                         // number of examples
  int64_t row = 0;                          // floats per image (h * w * c)
  int height = 0, width = 0, channels = 0;  // one image's shape (IDX: 28, 28, 1); 0: unknown
  std::vector<float> images;                // size * row, NHWC, values in [0, 1]
  std::vector<int32_t> labels;              // size, in [0, 10)
};

enum class Split { kTrain, kTest };

// Loads `dir`/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (the .gz preferred).
// Errors name the file: FAILED_PRECONDITION when a file is missing, INVALID_ARGUMENT or
// DATA_LOSS when one is malformed, or when images and labels disagree in count. With
// `roots`, each file must resolve inside them too (a link out of a root:
// DataRoots::Resolve's INVALID_ARGUMENT naming dataset.path); `dir` is checked already.
absl::StatusOr<Dataset> LoadIdxDataset(const std::string& dir, Split split,
                                       uint64_t max_bytes = uint64_t{1} << 31,
                                       const DataRoots& roots = {});

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_DATASET_H_
