// ParamLayout: the named tensors of a model packed into one flat float array, in Flax's
// order and with Flax's names ("Conv_0/kernel"). One flat array lets gradients be
// all-reduced in one call and optimizers run as one elementwise pass.
#ifndef LOCKSTEP_CORE_PARAMS_H_
#define LOCKSTEP_CORE_PARAMS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep {

struct ParamEntry {
  std::string name;            // "Dense_0/kernel"
  std::vector<int64_t> shape;  // Flax's shape: Dense (in, out), Conv HWIO
  size_t offset = 0;           // into the flat array, in floats
  size_t size = 0;             // prod(shape)
};

class ParamLayout {
 public:
  // Appends a tensor; returns its index.
  int Add(std::string name, std::vector<int64_t> shape);

  const std::vector<ParamEntry>& entries() const { return entries_; }
  size_t total() const { return total_; }

 private:
  std::vector<ParamEntry> entries_;
  size_t total_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_PARAMS_H_
