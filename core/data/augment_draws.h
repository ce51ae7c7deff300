// The random choices of the preprocessing steps, each a function of the step's key
// alone (docs/datasets.md, "Random steps"): step i of dataset.preprocess draws from
// op_key = fold_in(example_key, i), in JAX's partitionable threefry mode, and
// tools/reference/augment.py draws the same with jax.random.
//
// Thread safety: pure functions.
#ifndef LOCKSTEP_CORE_DATA_AUGMENT_DRAWS_H_
#define LOCKSTEP_CORE_DATA_AUGMENT_DRAWS_H_

#include "core/data/image_view.h"
#include "core/data/streamed_spec.h"
#include "core/rng/threefry.h"

namespace lockstep {

// RandomCrop's offset in an image of in_h x in_w once padded (in_h + 2 * padding, ...),
// for a crop of crop_h x crop_w that fits in it: top = randint(fold_in(op_key, 0), (), 0,
// padded_h - crop_h + 1), left likewise from fold_in(op_key, 1). Offsets are in the padded
// image.
CropBox RandomCropBox(rng::Key op_key, int padded_h, int padded_w, int crop_h, int crop_w);

// torchvision's RandomResizedCrop.get_params on an in_h x in_w image: u =
// uniform(fold_in(op_key, 0), (10, 2)); try t takes the area fraction
// scale_min + (scale_max - scale_min) * u[t, 0] and the aspect ratio
// exp(log(ratio_min) + (log(ratio_max) - log(ratio_min)) * u[t, 1]) in double, the sides
// rounded half to even; the first that fits gets top = randint(fold_in(op_key, 1), (), 0,
// in_h - h + 1) and left from fold_in(op_key, 2); after 10 misses, the central fallback.
CropBox RandomResizedCropBox(rng::Key op_key, int in_h, int in_w, const ResizedCropRanges& r);

// bernoulli(op_key, p): uniform(op_key, ()) < float32(p).
bool FlipDraw(rng::Key op_key, double p);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_AUGMENT_DRAWS_H_
