#include "core/train_state.h"

#include <cstring>

namespace lockstep {

uint64_t ParamChecksum(const std::vector<float>& params) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(params.data());
  for (size_t i = 0; i < params.size() * sizeof(float); ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace lockstep
