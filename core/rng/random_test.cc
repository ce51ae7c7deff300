#include "core/rng/random.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "core/testing.h"

namespace lockstep::rng {
namespace {

using nlohmann::json;

class RandomGolden : public ::testing::TestWithParam<const char*> {
 protected:
  Impl impl() const { return *ParseImpl(GetParam()); }
  json cases() const {
    std::ifstream in(testing::GoldenPath("rng.json"));
    return json::parse(in)[GetParam()];
  }
};

TEST_P(RandomGolden, UniformBernoulliPermutationAreBitExact) {
  for (const json& c : cases()) {
    const Key key = PRNGKey(c["seed"].get<int64_t>());
    SCOPED_TRACE(c["seed"].dump());
    std::vector<float> u(7);
    Uniform(key, impl(), 0.0f, 1.0f, u);
    EXPECT_EQ(u, c["uniform"].get<std::vector<float>>());
    Uniform(key, impl(), -2.0f, 3.0f, u);
    EXPECT_EQ(u, c["uniform_m2_3"].get<std::vector<float>>());
    std::vector<uint8_t> b(15);
    Bernoulli(key, impl(), 0.8f, b);
    EXPECT_EQ(std::vector<int>(b.begin(), b.end()), c["bernoulli_0.8_3x5"].get<std::vector<int>>());
    for (const auto& [n, want] : c["permutation"].items()) {
      EXPECT_EQ(Permutation(key, impl(), std::stoi(n)), want.get<std::vector<int32_t>>()) << n;
    }
  }
}

TEST_P(RandomGolden, NormalAndTruncatedNormalWithin1e6) {
  for (const json& c : cases()) {
    const Key key = PRNGKey(c["seed"].get<int64_t>());
    SCOPED_TRACE(c["seed"].dump());
    std::vector<float> v(9);
    Normal(key, impl(), v);
    EXPECT_LE(testing::MaxAbsDiff(v, c["normal"].get<std::vector<float>>()), 1e-6);
    TruncatedNormal(key, impl(), -2.0f, 2.0f, v);
    EXPECT_LE(testing::MaxAbsDiff(v, c["truncated_normal"].get<std::vector<float>>()), 1e-6);
    for (float x : v) {
      EXPECT_GT(x, -2.0f);
      EXPECT_LT(x, 2.0f);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, RandomGolden, ::testing::Values("partitionable", "legacy"));

TEST(Random, PublishedUniform) {
  std::vector<float> u(4);
  Uniform(PRNGKey(0), Impl::kPartitionable, 0.0f, 1.0f, u);
  const std::vector<float> want = {0.947667f, 0.9785799f, 0.3322915f, 0.4686685f};
  EXPECT_LE(testing::MaxAbsDiff(u, want), 1e-6);
}

TEST(Random, ErfInvEdges) {
  EXPECT_EQ(ErfInv(0.0f), 0.0f);
  EXPECT_TRUE(std::isinf(ErfInv(1.0f)));
  EXPECT_NEAR(ErfInv(0.5f), 0.4769362762f, 1e-6);
  EXPECT_NEAR(ErfInv(-0.999f), -2.326753765f, 1e-5);
}

// The radix sort against std::stable_sort: random keys of every width (a few distinct
// values, so that equal keys must keep their order, up to all 32 bits) and sizes.
TEST(Random, StableSortByKeysIsStdStableSort) {
  std::mt19937 gen(7);
  for (uint32_t distinct : {1u, 3u, 256u, 65537u, 0u}) {  // 0: any 32-bit key
    for (size_t n : {0, 1, 2, 255, 1000, 60000}) {
      std::vector<uint32_t> keys(n);
      for (uint32_t& k : keys) k = distinct == 0 ? gen() : gen() % distinct * 0x01010101u;
      std::vector<int32_t> x(n);
      for (int32_t& v : x) v = static_cast<int32_t>(gen());
      std::vector<size_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return keys[a] < keys[b]; });
      std::vector<int32_t> want(n);
      for (size_t i = 0; i < n; ++i) want[i] = x[order[i]];
      StableSortByKeys(x, keys);
      EXPECT_EQ(x, want) << distinct << " distinct keys, n = " << n;
    }
  }
}

}  // namespace
}  // namespace lockstep::rng
