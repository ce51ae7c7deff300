// ImageTransform: what a worker does to one stored example before it enters a batch:
// decode (JPEG with libjpeg-turbo, PNG with libpng; raw pixels as they are), the spec's
// preprocessing in order (resize, center crop, random crop with padding, random resized
// crop, horizontal flip), then scaling by 1/255 and the per-channel normalization, into
// float32 HWC of output_shape(). Every random choice is a function of the example's key
// alone (docs/datasets.md: the key of (epoch, example index)), so any worker, a replay and
// `lockstep train` compute the same pixels; tools/reference has the numpy twin the goldens
// check pixel for pixel.
//
// Thread safety: Apply is const and may run on several threads at once, each with its own
// Scratch.
#ifndef LOCKSTEP_CORE_DATA_IMAGE_TRANSFORM_H_
#define LOCKSTEP_CORE_DATA_IMAGE_TRANSFORM_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/data/example_source.h"
#include "core/model.h"
#include "core/rng/threefry.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

class ImageTransform {
 public:
  // Per-thread working memory (decoder handles, intermediate images).
  class Scratch {
   public:
    virtual ~Scratch() = default;
  };

  // The transform `spec` (validated: CheckDatasetSpec) asks for on `split` (the training
  // split's dataset.preprocess, the test split's dataset.test_preprocess), producing
  // images of `output_shape` (the model's input). INVALID_ARGUMENT naming the field when
  // the preprocessing cannot produce that shape.
  static absl::StatusOr<std::unique_ptr<ImageTransform>> Create(const v1::DatasetSpec& spec,
                                                                Split split, Dims output_shape);
  virtual ~ImageTransform() = default;

  virtual const Dims& output_shape() const = 0;
  // Whether any step draws from the key (false: Apply ignores it).
  virtual bool random() const = 0;
  virtual std::unique_ptr<Scratch> NewScratch() const = 0;
  // `example` into out[output_shape().size()]. INVALID_ARGUMENT or DATA_LOSS saying why
  // (a corrupt or truncated image, one of another size or channel count than the
  // preprocessing allows); the caller prefixes ExampleSource::Where.
  virtual absl::Status Apply(const StoredExample& example, rng::Key key, Scratch* scratch,
                             float* out) const = 0;
};

// Example `index` of `source` through `transform`: its pixels into
// out[transform.output_shape().size()], its label into *label; `stored` is the caller's
// buffer, reused. The source's errors name the file and the record already; the
// transform's come back prefixed with source.Where(index), so that a job fails with the
// file, the record and the reason ("dataset.path: /data/fm-train.tfrecord-00003-of-00016:
// record 17: corrupt JPEG: ..."). The worker's pipeline and bench/data call this.
absl::Status ReadAndTransform(const ExampleSource& source, const ImageTransform& transform,
                              int64_t index, rng::Key key, ImageTransform::Scratch* scratch,
                              StoredExample* stored, float* out, int64_t* label);

// The checks a job runs when a worker opens a split, before its first step: every label
// below `classes` (the model's outputs; ExampleSource::max_label), and, for a source whose
// images all have one stored shape (a record file), that the transform takes them to the
// model's input (it runs on example 0). INVALID_ARGUMENT naming Where(index) and the
// reason; a source's or transform's own error on example 0 as ReadAndTransform gives it.
absl::Status CheckSplitFitsModel(const ExampleSource& source, const ImageTransform& transform,
                                 int classes);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_IMAGE_TRANSFORM_H_
