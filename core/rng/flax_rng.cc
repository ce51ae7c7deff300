// Flax linen's per-module RNG derivation (reference §4): make_rng(stream) inside the scope of
// module path P, for the c-th call in that scope, returns fold_in(stream_root, first 4 bytes big-
// endian of SHA1(P..., c)). Contract: flax_rng.h.
#include "core/rng/flax_rng.h"

#include <array>
#include <string>

namespace lockstep::rng {
namespace {

// SHA-1 (FIPS 180-4) of a short message: Flax only hashes module names and counters.
std::array<uint8_t, 20> Sha1(const std::string& msg) {
  uint32_t h[5] = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u};
  std::string m = msg;
  const uint64_t bit_len = static_cast<uint64_t>(msg.size()) * 8;
  m.push_back(static_cast<char>(0x80));
  while (m.size() % 64 != 56) m.push_back(0);
  for (int i = 7; i >= 0; --i) m.push_back(static_cast<char>(bit_len >> (8 * i)));
  auto rotl = [](uint32_t v, int r) { return (v << r) | (v >> (32 - r)); };
  for (size_t off = 0; off < m.size(); off += 64) {
    uint32_t w[80];
    for (int i = 0; i < 16; ++i) {
      const auto* p = reinterpret_cast<const uint8_t*>(m.data() + off + 4 * i);
      w[i] = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
    }
    for (int i = 16; i < 80; ++i) w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; ++i) {
      uint32_t f, k;
      if (i < 20) {
        f = (b & c) | (~b & d), k = 0x5A827999u;
      } else if (i < 40) {
        f = b ^ c ^ d, k = 0x6ED9EBA1u;
      } else if (i < 60) {
        f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDCu;
      } else {
        f = b ^ c ^ d, k = 0xCA62C1D6u;
      }
      const uint32_t t = rotl(a, 5) + f + e + k + w[i];
      e = d, d = c, c = rotl(b, 30), b = a, a = t;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
  }
  std::array<uint8_t, 20> out;
  for (int i = 0; i < 20; ++i) out[i] = static_cast<uint8_t>(h[i / 4] >> (24 - 8 * (i % 4)));
  return out;
}

}  // namespace

uint32_t FlaxScopeHash(std::string_view module, uint32_t counter) {
  std::string msg(module);
  // Python's int.to_bytes((bit_length + 7) // 8, 'big'): minimal big-endian bytes.
  std::string num;
  for (uint32_t c = counter; c != 0; c >>= 8) num.insert(num.begin(), static_cast<char>(c & 0xFF));
  msg += num;
  const auto d = Sha1(msg);
  return (uint32_t{d[0]} << 24) | (uint32_t{d[1]} << 16) | (uint32_t{d[2]} << 8) | d[3];
}

Key FlaxMakeRng(Key stream_root, std::string_view module, uint32_t counter) {
  return FoldIn(stream_root, FlaxScopeHash(module, counter));
}

}  // namespace lockstep::rng
