#include "core/grad_digest.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/testing.h"

namespace lockstep {
namespace {

uint64_t Of(const std::string& s) {
  return Xxh64({reinterpret_cast<const unsigned char*>(s.data()), s.size()});
}

TEST(GradDigest, IsXxh64) {
  // Reference values of libxxhash 0.8.1's XXH64(data, len, 0).
  EXPECT_EQ(Of(""), 0xef46db3751d8e999ull);
  EXPECT_EQ(Of("a"), 0xd24ec4f1a98c6e5bull);
  EXPECT_EQ(Of("abc"), 0x44bc2cf5ad770999ull);
  std::string forty, long_one;
  for (int i = 0; i < 40; ++i) forty.push_back(static_cast<char>(i));
  for (int k = 0; k < 3; ++k) {
    for (int i = 0; i < 256; ++i) long_one.push_back(static_cast<char>(i));
  }
  long_one += "xyz";
  EXPECT_EQ(Of(forty), 0xf5da40f1b11741e9ull);
  EXPECT_EQ(Of(long_one), 0xe921a1b45bd779f8ull);
}

TEST(GradDigest, ChangesWithOneBitOfOneFloat) {
  std::vector<float> g(1000, 0.25f);
  const uint64_t d = GradDigest(g);
  g[517] = std::nextafter(g[517], 1.0f);
  EXPECT_NE(GradDigest(g), d);
  g[517] = 0.25f;
  EXPECT_EQ(GradDigest(g), d);
}

}  // namespace
}  // namespace lockstep
