// bfloat16 as JAX (ml_dtypes) and XLA convert to it: the upper 16 bits of a float32,
// rounded to nearest even, NaNs kept NaN (quiet). Host and CUDA code share these, so that
// every backend rounds alike. Mixed precision (a model's `dtype: bfloat16`, docs/models.md)
// keeps activations as float32 values that are bfloat16 numbers, rounded where XLA rounds
// them, and hands matmuls and convolutions their operands as Bf16 arrays.
#ifndef LOCKSTEP_CORE_BFLOAT16_H_
#define LOCKSTEP_CORE_BFLOAT16_H_

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace lockstep {

// One bfloat16 in memory (what oneDNN's bf16 and CUDA's __nv_bfloat16 hold).
struct Bf16 {
  uint16_t bits;
};
static_assert(sizeof(Bf16) == 2);

LS_HOST_DEVICE inline uint32_t FloatBits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return u;
}

LS_HOST_DEVICE inline float BitsFloat(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof(x));
  return x;
}

// float32 -> bfloat16, round to nearest even (subnormals kept, not flushed); a NaN stays
// a (quiet) NaN. Branch-free, so that loops over it vectorize.
LS_HOST_DEVICE inline uint16_t Bf16Bits(float x) {
  const uint32_t u = FloatBits(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

LS_HOST_DEVICE inline float Bf16Float(uint16_t bits) { return BitsFloat(uint32_t{bits} << 16); }

// The bfloat16 nearest x, as a float32: what an op computed in bfloat16 leaves.
LS_HOST_DEVICE inline float RoundBf16(float x) { return Bf16Float(Bf16Bits(x)); }

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_BFLOAT16_H_
