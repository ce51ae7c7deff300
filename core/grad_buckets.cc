// Gradient buckets: how a step all-reduces its gradients while backward still runs, as PyTorch DDP
// does. Contract: grad_buckets.h.
#include "core/grad_buckets.h"

#include <algorithm>

namespace lockstep {

std::vector<GradBucket> PlanGradBuckets(const Model& model, size_t bucket_bytes) {
  const auto& entries = model.layout().entries();
  const size_t total = model.layout().total();
  std::vector<GradBucket> buckets;
  if (total == 0) return buckets;
  if (bucket_bytes == 0) return {GradBucket{0, total, -1}};
  // The layer owning each tensor (-1: none; its gradient is complete only after backward).
  std::vector<int> owner(entries.size(), -1);
  const auto& layers = model.layers();
  for (size_t i = 0; i < layers.size(); ++i) {
    for (int index : {layers[i].kernel, layers[i].bias, layers[i].scale}) {
      if (index >= 0) owner[index] = static_cast<int>(i);
    }
    for (int j = 0; j < 4; ++j) {  // an attention layer's query, key, value and out
      for (int index : {layers[i].kernels[j], layers[i].biases[j]}) {
        if (index >= 0) owner[index] = static_cast<int>(i);
      }
    }
  }
  std::vector<size_t> by_offset(entries.size());  // tensors, highest offset first
  for (size_t e = 0; e < entries.size(); ++e) by_offset[e] = e;
  std::sort(by_offset.begin(), by_offset.end(),
            [&](size_t a, size_t b) { return entries[a].offset > entries[b].offset; });
  size_t next = 0;          // the next tensor of by_offset not known complete
  size_t end = total;       // the end of the bucket being filled
  size_t frontier = total;  // gradients [frontier, total) are complete
  for (int i = static_cast<int>(layers.size()) - 1; i >= 0; --i) {
    if (!layers[i].has_params()) continue;
    // Once layer i is done, so are the tensors of layers >= i: the complete suffix grows
    // down to the first tensor of another (earlier, or no) layer.
    while (next < by_offset.size() && owner[by_offset[next]] >= i) {
      frontier = entries[by_offset[next]].offset;
      ++next;
    }
    if (frontier < end && (end - frontier) * sizeof(float) >= bucket_bytes) {
      buckets.push_back({frontier, end - frontier, i});
      end = frontier;
    }
  }
  if (end > 0) buckets.push_back({0, end, -1});
  return buckets;
}

std::vector<GradBucket> AlignGradBuckets(const std::vector<GradBucket>& buckets, size_t align) {
  std::vector<GradBucket> out;
  if (buckets.empty()) return out;
  size_t end = buckets.front().offset + buckets.front().size;
  for (const GradBucket& b : buckets) {
    const size_t begin = b.offset == 0 ? 0 : std::min(end, (b.offset + align - 1) / align * align);
    if (begin < end) out.push_back({begin, end - begin, b.layer});
    end = begin;
  }
  return out;
}

}  // namespace lockstep
