// Gradient buckets: how a step all-reduces its gradients while backward still runs, as
// PyTorch DDP does. The flat gradient buffer is laid out in forward order (model.h) and
// backward walks the layers last to first, so the gradients that exist at any point form
// a suffix of the buffer; a bucket is a contiguous range of it, complete once the last
// layer it reaches into has produced its parameters' gradients. Buckets end at layer
// boundaries (a layer's gradients are never split) and hold at least `bucket_bytes`,
// except the last, which backward completes at its end.
#ifndef LOCKSTEP_CORE_GRAD_BUCKETS_H_
#define LOCKSTEP_CORE_GRAD_BUCKETS_H_

#include <cstddef>
#include <vector>

#include "core/model.h"

namespace lockstep {

struct GradBucket {
  size_t offset = 0, size = 0;  // floats [offset, offset + size) of the flat gradients
  // The bucket is complete once backward has produced layer `layer`'s parameter gradients
  // (and so those of every later layer); -1: only when backward is done.
  int layer = -1;
};

// The buckets in the order backward completes them (highest offsets first); together they
// cover the buffer exactly once. bucket_bytes 0: one bucket, the whole buffer, after
// backward (no overlap); 1: one bucket per layer with parameters. Empty for a model
// without parameters.
std::vector<GradBucket> PlanGradBuckets(const Model& model, size_t bucket_bytes);

// `buckets` (PlanGradBuckets's) with every offset but the first bucket's end and the last
// one's 0 rounded up to a multiple of `align` floats: each bucket then ends where the
// next, complete later, begins; the floats between an offset and its rounding wait for
// that next bucket. Buckets left empty are dropped. For core/exact_sum.h's blocks.
std::vector<GradBucket> AlignGradBuckets(const std::vector<GradBucket>& buckets, size_t align);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_GRAD_BUCKETS_H_
