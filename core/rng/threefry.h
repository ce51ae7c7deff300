// JAX's default PRNG: Threefry-2x32 keys, split, fold_in and 32-bit random bits, in
// both of JAX's modes (reference §1-2). Bit-exact with jax.random.
//
// The per-element functions (RandomBitsAt) are inline and host/device so that the CUDA
// backend draws dropout masks with the very same code.
#ifndef LOCKSTEP_CORE_RNG_THREEFRY_H_
#define LOCKSTEP_CORE_RNG_THREEFRY_H_

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/host_device.h"

namespace lockstep::rng {

// A raw threefry key, as jax.random.key_data(PRNGKey(seed)).
struct Key {
  uint32_t k0 = 0;
  uint32_t k1 = 0;
  friend bool operator==(const Key&, const Key&) = default;
};

// How split and random_bits derive counters (jax_threefry_partitionable).
enum class Impl { kPartitionable, kLegacy };

// "partitionable" or "legacy"; INVALID_ARGUMENT otherwise.
absl::StatusOr<Impl> ParseImpl(std::string_view name);
const char* ImplName(Impl impl);

struct Pair {
  uint32_t y0, y1;
};

LS_HOST_DEVICE inline uint32_t Rotl(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }

// One Threefry round: x0 += x1, x1 = rotl(x1, r) ^ x0.
LS_HOST_DEVICE inline void Mix(uint32_t& x0, uint32_t& x1, int r) {
  x0 += x1;
  x1 = Rotl(x1, r) ^ x0;
}

// Four rounds, then the key injection that follows them.
LS_HOST_DEVICE inline void Rounds(uint32_t& x0, uint32_t& x1, int r0, int r1, int r2, int r3,
                                  uint32_t k0, uint32_t k1) {
  Mix(x0, x1, r0);
  Mix(x0, x1, r1);
  Mix(x0, x1, r2);
  Mix(x0, x1, r3);
  x0 += k0;
  x1 += k1;
}

// The Threefry-2x32 hash, 20 rounds: written out, with constant rotations, so that a loop
// over counters vectorizes (dropout masks are drawn one element at a time).
LS_HOST_DEVICE inline Pair Threefry2x32(Key key, uint32_t x0, uint32_t x1) {
  const uint32_t k0 = key.k0, k1 = key.k1, k2 = key.k0 ^ key.k1 ^ 0x1BD11BDAu;
  x0 += k0;
  x1 += k1;
  Rounds(x0, x1, 13, 15, 26, 6, k1, k2 + 1u);
  Rounds(x0, x1, 17, 29, 16, 24, k2, k0 + 2u);
  Rounds(x0, x1, 13, 15, 26, 6, k0, k1 + 3u);
  Rounds(x0, x1, 17, 29, 16, 24, k1, k2 + 4u);
  Rounds(x0, x1, 13, 15, 26, 6, k2, k0 + 5u);
  return {x0, x1};
}

// Element i of random_bits(key, 32, shape) in the partitionable mode: the hash of the
// counter i as (high word, low word).
LS_HOST_DEVICE inline uint32_t PartitionableBitsAt(Key key, uint32_t hi, uint32_t lo) {
  Pair p = Threefry2x32(key, hi, lo);
  return p.y0 ^ p.y1;
}

// Element i of random_bits(key, 32, shape) with n = prod(shape), row-major.
LS_HOST_DEVICE inline uint32_t RandomBitsAt(Key key, Impl impl, uint64_t i, uint64_t n) {
  if (impl == Impl::kPartitionable) {
    return PartitionableBitsAt(key, static_cast<uint32_t>(i >> 32), static_cast<uint32_t>(i));
  }
  // Legacy: threefry_2x32(key, iota(n)) pads iota to even length m with a 0, hashes the
  // pairs (A[j], B[j]) of its two halves and returns concat(all y0, all y1).
  const uint64_t half = (n + 1) / 2;
  const uint64_t j = i < half ? i : i - half;
  const uint64_t b = j + half;
  Pair p = Threefry2x32(key, static_cast<uint32_t>(j), b < n ? static_cast<uint32_t>(b) : 0u);
  return i < half ? p.y0 : p.y1;
}

// PRNGKey(seed) with 64-bit mode off: [0, seed mod 2^32].
Key PRNGKey(int64_t seed);

// split(key, n).
std::vector<Key> Split(Key key, int n, Impl impl = Impl::kPartitionable);

// fold_in(key, data); the same in both modes.
Key FoldIn(Key key, uint32_t data);

// random_bits(key, 32, shape) with out.size() == prod(shape).
void RandomBits(Key key, Impl impl, std::span<uint32_t> out);

}  // namespace lockstep::rng

#endif  // LOCKSTEP_CORE_RNG_THREEFRY_H_
