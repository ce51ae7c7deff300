#include "core/rng/threefry.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/rng/flax_rng.h"
#include "core/testing.h"

namespace lockstep::rng {
namespace {

using nlohmann::json;

std::vector<uint32_t> Flat(const std::vector<Key>& keys) {
  std::vector<uint32_t> out;
  for (const Key& k : keys) out.insert(out.end(), {k.k0, k.k1});
  return out;
}

json Golden() {
  std::ifstream in(testing::GoldenPath("rng.json"));
  return json::parse(in);
}

TEST(Threefry, Random123KnownAnswers) {
  Pair p = Threefry2x32({0, 0}, 0, 0);
  EXPECT_EQ(p.y0, 0x6b200159u);
  EXPECT_EQ(p.y1, 0x99ba4efeu);
  p = Threefry2x32({~0u, ~0u}, ~0u, ~0u);
  EXPECT_EQ(p.y0, 0x1cb996fcu);
  EXPECT_EQ(p.y1, 0xbb002be7u);
  p = Threefry2x32({0x13198a2eu, 0x03707344u}, 0x243f6a88u, 0x85a308d3u);
  EXPECT_EQ(p.y0, 0xc4923a9cu);
  EXPECT_EQ(p.y1, 0x483df7a0u);
}

TEST(Threefry, PublishedVectors) {
  EXPECT_EQ(PRNGKey(0), (Key{0, 0}));
  EXPECT_EQ(PRNGKey(42), (Key{0, 42}));
  EXPECT_EQ(PRNGKey(-1), (Key{0, 4294967295u}));
  EXPECT_EQ(Flat(Split(PRNGKey(0), 2, Impl::kLegacy)),
            (std::vector<uint32_t>{4146024105u, 967050713u, 2718843009u, 1272950319u}));
  EXPECT_EQ(Flat(Split(PRNGKey(0), 2, Impl::kPartitionable)),
            (std::vector<uint32_t>{1797259609u, 2579123966u, 928981903u, 3453687069u}));
  EXPECT_EQ(Flat(Split(PRNGKey(0), 4, Impl::kLegacy)),
            (std::vector<uint32_t>{2285895361u, 1501764800u, 1518642379u, 4090693311u, 433833334u,
                                   4221794875u, 839183663u, 3740430601u}));
  EXPECT_EQ(FoldIn(PRNGKey(0), 4), (Key{2285895361u, 433833334u}));
  std::vector<uint32_t> bits(3);
  RandomBits(PRNGKey(1701), Impl::kLegacy, bits);
  EXPECT_EQ(bits, (std::vector<uint32_t>{56197195u, 4200222568u, 961309823u}));
}

TEST(Threefry, ParseImpl) {
  EXPECT_EQ(*ParseImpl(""), Impl::kPartitionable);
  EXPECT_EQ(*ParseImpl("legacy"), Impl::kLegacy);
  EXPECT_THAT(ParseImpl("fast"), testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                   ::testing::HasSubstr("rng_impl")));
}

class ThreefryGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(ThreefryGolden, KeysSplitFoldInBitsMatchJax) {
  const Impl impl = *ParseImpl(GetParam());
  const json golden = Golden();
  ASSERT_FALSE(golden[GetParam()].empty());
  for (const json& c : golden[GetParam()]) {
    const Key key = PRNGKey(c["seed"].get<int64_t>());
    SCOPED_TRACE(c["seed"].dump());
    EXPECT_EQ((std::vector<uint32_t>{key.k0, key.k1}), c["key"].get<std::vector<uint32_t>>());
    for (const auto& [n, want] : c["split"].items()) {
      EXPECT_EQ(Flat(Split(key, std::stoi(n), impl)), want.get<std::vector<uint32_t>>()) << n;
    }
    for (const auto& [d, want] : c["fold_in"].items()) {
      const Key k = FoldIn(key, static_cast<uint32_t>(std::stoull(d)));
      EXPECT_EQ((std::vector<uint32_t>{k.k0, k.k1}), want.get<std::vector<uint32_t>>()) << d;
    }
    for (const auto& [n, want] : c["random_bits"].items()) {
      std::vector<uint32_t> bits(std::stoi(n));
      RandomBits(key, impl, bits);
      EXPECT_EQ(bits, want.get<std::vector<uint32_t>>()) << n;
    }
    std::vector<uint32_t> bits(15);
    RandomBits(key, impl, bits);
    EXPECT_EQ(bits, c["random_bits_3x5"].get<std::vector<uint32_t>>());
    for (uint64_t i = 0; i < bits.size(); ++i) EXPECT_EQ(RandomBitsAt(key, impl, i, 15), bits[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ThreefryGolden, ::testing::Values("partitionable", "legacy"));

}  // namespace
}  // namespace lockstep::rng
