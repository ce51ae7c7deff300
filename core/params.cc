// ParamLayout: the named tensors of a model packed into one flat float array, in Flax's order and
// with Flax's names ("Conv_0/kernel"). Contract: params.h.
#include "core/params.h"

namespace lockstep {

int ParamLayout::Add(std::string name, std::vector<int64_t> shape) {
  size_t size = 1;
  for (int64_t d : shape) size *= static_cast<size_t>(d);
  entries_.push_back({std::move(name), std::move(shape), total_, size});
  total_ += size;
  return static_cast<int>(entries_.size()) - 1;
}

}  // namespace lockstep
