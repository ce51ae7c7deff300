// jax.random's float32 distributions and permutation on top of threefry (reference §3).
// uniform, bernoulli and permutation are bit-exact; normal and truncated_normal go
// through erf/erf_inv, whose last-ulp rounding may differ from XLA's.
#ifndef LOCKSTEP_CORE_RNG_RANDOM_H_
#define LOCKSTEP_CORE_RNG_RANDOM_H_

#include <cstdint>
#include <span>
#include <vector>

#include "core/host_device.h"
#include "core/rng/threefry.h"

namespace lockstep::rng {

// Maps 32 random bits to a float in [0, 1 - 2^-23] as jax.random.uniform does.
LS_HOST_DEVICE inline float BitsToUnitFloat(uint32_t bits) {
  union {
    uint32_t u;
    float f;
  } v;
  v.u = (bits >> 9) | 0x3F800000u;
  return v.f - 1.0f;
}

// uniform(key, shape, float32, minval, maxval).
void Uniform(Key key, Impl impl, float minval, float maxval, std::span<float> out);

// bernoulli(key, p, shape): uniform < p.
void Bernoulli(Key key, Impl impl, float p, std::span<uint8_t> out);

// normal(key, shape, float32).
void Normal(Key key, Impl impl, std::span<float> out);

// truncated_normal(key, lower, upper, shape, float32).
void TruncatedNormal(Key key, Impl impl, float lower, float upper, std::span<float> out);

// permutation(key, n): ceil(3 ln n / ln(2^32-1)) rounds of stable sorts by random bits.
std::vector<int32_t> Permutation(Key key, Impl impl, int64_t n);

// `x` reordered by `keys` (keys[i] goes with x[i]; equal keys keep their order), as
// std::stable_sort by key orders it: four stable radix passes of 8 bits. Permutation's
// sort (bench/plan_bench.cc compares it with an indirect std::stable_sort).
void StableSortByKeys(std::span<int32_t> x, std::span<const uint32_t> keys);

// XLA's float32 erf_inv (Giles' single-precision polynomial).
float ErfInv(float x);

}  // namespace lockstep::rng

#endif  // LOCKSTEP_CORE_RNG_RANDOM_H_
