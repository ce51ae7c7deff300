// ExactSum on one rank (no collective): the same V contributions in every order give the
// same bits (where float sums in those orders differ), the error against a double sum
// stays within the header's bound, the worst case does not overflow, and the edge cases
// (zero blocks, non-finite values, bad arguments). Across ranks over Gloo:
// workers/gloo/exact_sum_gloo_test.cc.
#include "core/exact_sum.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/testing.h"

namespace lockstep {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

// V contributions of n floats, each a uniform mantissa times 2^[lo, hi] (by default
// magnitudes over 16 decades, so that float sums in different orders disagree in their
// last bits).
std::vector<std::vector<float>> Contributions(int v, size_t n, uint32_t seed, int lo = -26,
                                              int hi = 26) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(lo, hi);
  std::vector<std::vector<float>> c(v, std::vector<float>(n));
  for (auto& x : c) {
    for (float& f : x) f = std::ldexp(mantissa(gen), exponent(gen));
  }
  return c;
}

std::vector<float> SumInOrder(const std::vector<std::vector<float>>& c,
                              const std::vector<int>& order,
                              size_t block = ExactSum::kDefaultBlock) {
  const size_t n = c[0].size();
  std::vector<const float*> local;
  for (int i : order) local.push_back(c[i].data());
  std::vector<float> out(n);
  ExactSum sum(nullptr, static_cast<int>(c.size()), block);
  EXPECT_OK(sum.Sum(local, n, out.data(), {}));
  return out;
}

TEST(ExactSum, EveryOrderGivesTheSameBitsWhereFloatSumsDiffer) {
  const int v = 4;
  const size_t n = 10000;  // not a multiple of the block
  const auto c = Contributions(v, n, 7);
  std::vector<int> order = {0, 1, 2, 3};
  const std::vector<float> first = SumInOrder(c, order);
  bool float_orders_differ = false;
  while (std::next_permutation(order.begin(), order.end())) {
    const std::vector<float> got = SumInOrder(c, order);
    ASSERT_EQ(std::memcmp(got.data(), first.data(), n * sizeof(float)), 0);
    for (size_t i = 0; i < n && !float_orders_differ; ++i) {
      float a = 0, b = 0;
      for (int k = 0; k < v; ++k) a += c[k][i];
      for (int k : order) b += c[k][i];
      float_orders_differ = a != b;
    }
  }
  EXPECT_TRUE(float_orders_differ) << "the data would not tell an order-dependent sum apart";
}

TEST(ExactSum, WithinTheHeaderBoundOfTheTrueSum) {
  for (int v : {1, 2, 3, 4, 8}) {
    const size_t n = 5000, block = 256;
    // Per element, magnitudes within 2^[-12, 12] (a double adds 8 of them exactly); the
    // second half of each block 2^-60 times smaller, and one element per block 2^20, so
    // that those are rounded to the block's fixed-point grid (the bound's second term).
    auto c = Contributions(v, n, 11 + v, -12, 12);
    for (auto& x : c) {
      for (size_t i = 0; i < n; ++i) {
        if (i % block >= block / 2) x[i] = std::ldexp(x[i], -60);
        if (i % block == 0) x[i] = std::ldexp(1.0f, 20);
      }
    }
    std::vector<int> order(v);
    for (int k = 0; k < v; ++k) order[k] = k;
    const std::vector<float> got = SumInOrder(c, order, block);
    const int h = ExactSum::Headroom(v);
    for (size_t b = 0; b * block < n; ++b) {
      double largest = 0;
      for (const auto& x : c) {
        for (size_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
          largest = std::max(largest, std::fabs(double(x[i])));
        }
      }
      for (size_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
        double exact = 0;
        for (const auto& x : c) exact += x[i];  // exact (see above)
        const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(exact), 1e-30)) - 23);
        ASSERT_LE(std::fabs(got[i] - exact), 0.5 * ulp + largest * std::ldexp(1.0, 2 * h - 62))
            << "V " << v << " element " << i;
      }
    }
  }
}

TEST(ExactSum, LargestMagnitudesDoNotOverflow) {
  for (int v : {1, 3, 4, 64}) {
    std::vector<std::vector<float>> c(
        v, {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 1.5f, 0.0f});
    std::vector<int> order(v);
    for (int k = 0; k < v; ++k) order[k] = k;
    const std::vector<float> got = SumInOrder(c, order, 2);
    // The first block's sums exceed float: inf (as a float sum would give), same sign.
    EXPECT_EQ(got[0],
              v == 1 ? std::numeric_limits<float>::max() : std::numeric_limits<float>::infinity());
    EXPECT_EQ(got[1], -got[0]);
    EXPECT_EQ(got[2], 1.5f * v);
    EXPECT_EQ(got[3], 0.0f);
  }
}

TEST(ExactSum, ZeroAndNonFiniteBlocks) {
  std::vector<std::vector<float>> c = {{0, 0, 1, std::numeric_limits<float>::infinity()},
                                       {0, -0.0f, 2, 3}};
  const std::vector<float> got = SumInOrder(c, {1, 0}, 2);
  EXPECT_EQ(got[0], 0.0f);
  EXPECT_EQ(got[1], 0.0f);
  EXPECT_TRUE(std::isnan(got[2]));  // its block holds an inf
  EXPECT_TRUE(std::isnan(got[3]));
  EXPECT_EQ(ExactSum::BlockExponent(std::vector<const float*>{c[0].data()}, 0, 2),
            ExactSum::kZeroBlock);
  const float quarter = 0.25f, half = 0.5f;
  EXPECT_EQ(ExactSum::BlockExponent(std::vector<const float*>{&quarter}, 0, 1), -1);
  EXPECT_EQ(ExactSum::BlockExponent(std::vector<const float*>{&half}, 0, 1), 0);
  // The largest magnitude decides, whatever the sign; subnormals have exponents too; a
  // NaN or an infinity of either sign anywhere in the block makes it non-finite.
  const auto exponent = [](std::vector<float> x) {
    return ExactSum::BlockExponent(std::vector<const float*>{x.data()}, 0, x.size());
  };
  EXPECT_EQ(exponent({0.25f, -3.0f, 1.0f}), 2);
  EXPECT_EQ(exponent({std::numeric_limits<float>::denorm_min(), -0.0f}), -148);
  EXPECT_EQ(exponent({-std::numeric_limits<float>::max()}), 128);
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
        -std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(exponent({1.0f, bad, 2.0f}), ExactSum::kNonFinite) << bad;
  }
}

TEST(ExactSum, Headroom) {
  EXPECT_EQ(ExactSum::Headroom(1), 0);
  EXPECT_EQ(ExactSum::Headroom(2), 1);
  EXPECT_EQ(ExactSum::Headroom(3), 2);
  EXPECT_EQ(ExactSum::Headroom(4), 2);
  EXPECT_EQ(ExactSum::Headroom(5), 3);
}

TEST(ExactSum, AlsoMaxValuesComeBackAsTheyWereOnOneRank) {
  // Alone, the max over the ranks is this rank's own; with no floats to sum as well.
  const float x[] = {1.5f, -2.0f};
  const float* local[] = {x};
  float out[2];
  std::vector<int64_t> also = {std::numeric_limits<int64_t>::min(), 7, -3};
  ExactSum sum(nullptr, 1);
  EXPECT_OK(sum.Sum(local, 2, out, {}, also));
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_THAT(also, ::testing::ElementsAre(std::numeric_limits<int64_t>::min(), 7, -3));
  EXPECT_OK(sum.Sum(local, 0, nullptr, {}, also));
  EXPECT_THAT(also, ::testing::ElementsAre(std::numeric_limits<int64_t>::min(), 7, -3));
}

TEST(ExactSum, RejectsMissingData) {
  ExactSum sum(nullptr, 2);
  float out[2];
  EXPECT_THAT(sum.Sum({}, 2, out, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no local contributions")));
  const float* null = nullptr;
  EXPECT_THAT(sum.Sum(std::span<const float* const>(&null, 1), 2, out, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null data")));
  const float x[2] = {1, 2};
  const float* local[] = {x};
  EXPECT_OK(sum.Sum(local, 0, nullptr, {}));
  EXPECT_OK(sum.Sum(local, 2, out, {}));
  EXPECT_EQ(out[1], 2.0f);
}

}  // namespace
}  // namespace lockstep
