// jax.random's float32 distributions and permutation on top of threefry (reference §3). Contract:
// random.h.
#include "core/rng/random.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

namespace lockstep::rng {
namespace {

constexpr float kSqrt2 = 1.41421356237309504880f;

std::vector<uint32_t> Bits(Key key, Impl impl, size_t n) {
  std::vector<uint32_t> bits(n);
  RandomBits(key, impl, bits);
  return bits;
}

float Erf(float x) { return static_cast<float>(std::erf(static_cast<double>(x))); }

}  // namespace

float ErfInv(float x) {
  static constexpr float kLt5[9] = {2.81022636e-08f,  3.43273939e-07f, -3.5233877e-06f,
                                    -4.39150654e-06f, 0.00021858087f,  -0.00125372503f,
                                    -0.00417768164f,  0.246640727f,    1.50140941f};
  static constexpr float kGe5[9] = {-0.000200214257f, 0.000100950558f, 0.00134934322f,
                                    -0.00367342844f,  0.00573950773f,  -0.0076224613f,
                                    0.00943887047f,   1.00167406f,     2.83297682f};
  if (std::fabs(x) == 1.0f) return x * INFINITY;
  float w = -std::log1p(-x * x);
  const bool lt = w < 5.0f;
  const float* c = lt ? kLt5 : kGe5;
  w = lt ? w - 2.5f : std::sqrt(w) - 3.0f;
  float p = c[0];
  for (int i = 1; i < 9; ++i) p = c[i] + p * w;
  return p * x;
}

void Uniform(Key key, Impl impl, float minval, float maxval, std::span<float> out) {
  const float range = maxval - minval;
  const uint64_t n = out.size();
  for (uint64_t i = 0; i < n; ++i) {
    const float f = BitsToUnitFloat(RandomBitsAt(key, impl, i, n));
    // XLA contracts f * range + minval into one fused multiply-add; so do we.
    out[i] = std::max(minval, std::fma(f, range, minval));
  }
}

void Bernoulli(Key key, Impl impl, float p, std::span<uint8_t> out) {
  const uint64_t n = out.size();
  for (uint64_t i = 0; i < n; ++i) {
    out[i] = BitsToUnitFloat(RandomBitsAt(key, impl, i, n)) < p ? 1 : 0;
  }
}

void Normal(Key key, Impl impl, std::span<float> out) {
  Uniform(key, impl, std::nextafter(-1.0f, 0.0f), 1.0f, out);
  for (float& v : out) v = kSqrt2 * ErfInv(v);
}

void TruncatedNormal(Key key, Impl impl, float lower, float upper, std::span<float> out) {
  const float a = Erf(lower / kSqrt2);
  const float b = Erf(upper / kSqrt2);
  Uniform(key, impl, a, b, out);
  const float lo = std::nextafter(lower, INFINITY);
  const float hi = std::nextafter(upper, -INFINITY);
  for (float& v : out) v = std::clamp(kSqrt2 * ErfInv(v), lo, hi);
}

std::vector<int32_t> Permutation(Key key, Impl impl, int64_t n) {
  std::vector<int32_t> x(n);
  std::iota(x.begin(), x.end(), 0);
  const double uint32_max = 4294967295.0;
  const int rounds = static_cast<int>(std::ceil(
      3.0 * std::log(static_cast<double>(std::max<int64_t>(1, n))) / std::log(uint32_max)));
  for (int r = 0; r < rounds; ++r) {
    std::vector<Key> ks = Split(key, 2, impl);
    key = ks[0];
    StableSortByKeys(x, Bits(ks[1], impl, n));
  }
  return x;
}

void StableSortByKeys(std::span<int32_t> x, std::span<const uint32_t> keys) {
  struct Item {
    uint32_t key;
    int32_t value;
  };
  std::vector<Item> a(x.size()), b(x.size());
  for (size_t i = 0; i < x.size(); ++i) a[i] = {keys[i], x[i]};
  for (int shift = 0; shift < 32; shift += 8) {
    std::array<size_t, 257> start{};  // start[d + 1]: how many items have digit d
    for (const Item& it : a) ++start[((it.key >> shift) & 0xff) + 1];
    for (size_t d = 1; d < start.size(); ++d) start[d] += start[d - 1];
    for (const Item& it : a) b[start[(it.key >> shift) & 0xff]++] = it;
    a.swap(b);
  }
  for (size_t i = 0; i < x.size(); ++i) x[i] = a[i].value;
}

}  // namespace lockstep::rng
