// JAX's default PRNG: Threefry-2x32 keys, split, fold_in and 32-bit random bits, in both of JAX's
// modes (reference §1-2). Contract: threefry.h.
#include "core/rng/threefry.h"

#include "absl/strings/str_cat.h"

namespace lockstep::rng {

absl::StatusOr<Impl> ParseImpl(std::string_view name) {
  if (name.empty() || name == "partitionable") return Impl::kPartitionable;
  if (name == "legacy") return Impl::kLegacy;
  return absl::InvalidArgumentError(absl::StrCat("rng_impl: unknown value \"", std::string(name),
                                                 "\" (expected partitionable or legacy)"));
}

const char* ImplName(Impl impl) {
  return impl == Impl::kPartitionable ? "partitionable" : "legacy";
}

Key PRNGKey(int64_t seed) { return {0u, static_cast<uint32_t>(seed)}; }

Key FoldIn(Key key, uint32_t data) {
  Pair p = Threefry2x32(key, 0u, data);
  return {p.y0, p.y1};
}

std::vector<Key> Split(Key key, int n, Impl impl) {
  std::vector<Key> out(n);
  if (impl == Impl::kPartitionable) {
    for (int i = 0; i < n; ++i) out[i] = FoldIn(key, static_cast<uint32_t>(i));
    return out;
  }
  // Legacy: threefry_2x32(key, iota(2n)) reshaped to (n, 2).
  std::vector<uint32_t> bits(2 * static_cast<size_t>(n));
  RandomBits(key, Impl::kLegacy, bits);
  for (int i = 0; i < n; ++i) out[i] = {bits[2 * i], bits[2 * i + 1]};
  return out;
}

void RandomBits(Key key, Impl impl, std::span<uint32_t> out) {
  const uint64_t n = out.size();
  if (impl == Impl::kLegacy) {
    // One hash yields two outputs: elements j and j + half.
    const uint64_t half = (n + 1) / 2;
    for (uint64_t j = 0; j < half; ++j) {
      const uint64_t b = j + half;
      Pair p = Threefry2x32(key, static_cast<uint32_t>(j), b < n ? static_cast<uint32_t>(b) : 0u);
      out[j] = p.y0;
      if (b < n) out[b] = p.y1;
    }
    return;
  }
  // The mode as a constant, so that the loop vectorizes.
  for (uint64_t i = 0; i < n; ++i) out[i] = RandomBitsAt(key, Impl::kPartitionable, i, n);
}

}  // namespace lockstep::rng
