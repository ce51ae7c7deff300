// Dataset: an image-classification split in host memory, float32 images and int32 labels,
// which the step uploads (StepExecutor::Upload). Token datasets for sequence models use the
// same struct: token ids as the "images" and one target per position as the labels. The
// step library's only data header: loading and checking one is the data library's
// (core/data/dataset.h, core/data/token_dataset.h).
#ifndef LOCKSTEP_CORE_DATA_HOST_DATASET_H_
#define LOCKSTEP_CORE_DATA_HOST_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/model.h"

namespace lockstep {

struct Dataset {
  int64_t size = 0;             // number of examples
  int64_t row = 0;              // floats per image (h * w * c)
  Dims shape;                   // one image's, NHWC without N
  std::vector<float> images;    // size * row, NHWC
  std::vector<int32_t> labels;  // size * label_row, each >= 0
  int64_t max_label_index = 0;  // where the largest label is (labels[max_label_index])
  // Token datasets (core/data/token_dataset.h): targets per example (the context), and
  // the largest input token (images hold token ids); 1 and -1 for images.
  int64_t label_row = 1;
  int32_t max_token = -1;
  // What it was read from, for errors: the spec's field ("dataset.train_path") and the
  // images' and labels' sources ("/data/train.npz: array 'image'", or an IDX file).
  std::string field, images_from, labels_from;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_HOST_DATASET_H_
