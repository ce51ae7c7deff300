// ExactSum on one rank (no collective): the same V contributions in every order give the
// same bits (where float sums in those orders differ), the error against a double sum
// stays within the header's bound, the worst case does not overflow, the edge cases
// (zero blocks, non-finite values, bad arguments), and Reduce's shortcuts give bit for bit
// the header's steps 2-4 written out. Across ranks over Gloo:
// workers/gloo/exact_sum_gloo_test.cc.
#include "core/exact_sum.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "absl/base/casts.h"
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

// Steps 2-4 of the header as written, for every element: the reference Reduce must equal.
std::vector<float> FixedPointReference(const std::vector<std::vector<float>>& c, size_t block) {
  const size_t n = c[0].size();
  const int h = ExactSum::Headroom(static_cast<int>(c.size()));
  std::vector<const float*> all;
  for (const auto& x : c) all.push_back(x.data());
  std::vector<float> out(n);
  for (size_t b = 0; b < n; b += block) {
    const size_t end = std::min(n, b + block);
    const int64_t e = ExactSum::BlockExponent(all, b, end);
    for (size_t i = b; i < end; ++i) {
      if (e == ExactSum::kZeroBlock || e == ExactSum::kNonFinite) {
        out[i] = e == ExactSum::kZeroBlock ? 0.0f : std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      int64_t total = 0;
      for (const auto& x : c) total += std::llrint(std::ldexp(double{x[i]}, int(62 - h - e)));
      out[i] = static_cast<float>(std::ldexp(double{static_cast<float>(total)}, int(e + h - 62)));
    }
  }
  return out;
}

// Contributions that take every way through Reduce: blocks of one binade (a float add or
// an exact double sum), of 16 decades, with elements 2^-45 and 2^-70 times the block's
// largest (rounded to the fixed-point grid), subnormals, zeros of both signs, exact
// cancellations, sums at float's smallest normal and past its largest, and non-finite
// values.
std::vector<std::vector<float>> EdgeContributions(int v, size_t n, size_t block, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> kind(0, 9), wide(-26, 26), pick(0, v - 1);
  std::vector<std::vector<float>> c(v, std::vector<float>(n));
  const float min_normal = std::numeric_limits<float>::min();
  for (size_t b = 0; b < n; b += block) {
    const int k = kind(gen);
    for (size_t i = b; i < std::min(n, b + block); ++i) {
      for (int j = 0; j < v; ++j) {
        float& x = c[j][i];
        switch (k) {
          case 0:
            x = mantissa(gen);
            break;  // one binade
          case 1:
            x = std::ldexp(mantissa(gen), wide(gen));
            break;  // 16 decades
          case 2:
            x = std::ldexp(mantissa(gen), i % 3 == 0 ? -45 : 0);
            break;
          case 3:
            x = std::ldexp(mantissa(gen), i % 5 == 0 ? -70 : 3);
            break;
          case 4:
            x = mantissa(gen) * min_normal * (i % 2 ? 4.0f : 0.25f);
            break;  // subnormals
          case 5:
            x = i % 3 == 0 ? (j % 2 ? -0.0f : 0.0f) : mantissa(gen);
            break;
          case 6:
            x = (j % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f + float(i % 7) / 8, -3);
            break;
          case 7:
            x = (i % 4 == 0 ? min_normal : 0.0f) * (j == 0 ? 1.5f : -1.0f) +
                (i % 4 == 1 ? std::ldexp(1.0f, -126 - j) : 0.0f);
            break;
          case 8:
            x = std::numeric_limits<float>::max() * (i % 2 ? 0.75f : -0.9f);
            break;
          default:
            x = mantissa(gen);
        }
      }
    }
    if (k == 9)
      c[pick(gen)][b] = (b / block) % 2 ? std::numeric_limits<float>::infinity()
                                        : std::numeric_limits<float>::quiet_NaN();
  }
  return c;
}

TEST(ExactSum, ReduceIsStepsTwoToFourBitForBit) {
  for (int v : {1, 2, 3, 4, 5, 8}) {
    for (size_t block : {size_t{7}, ExactSum::kDefaultBlock}) {
      const size_t n = 40 * block + 3;
      const auto c = EdgeContributions(v, n, block, 100 * v + static_cast<uint32_t>(block));
      std::vector<const float*> all;
      for (const auto& x : c) all.push_back(x.data());
      std::vector<float> got(n);
      ExactSum::Reduce(v, block, all, n, got.data());
      const std::vector<float> want = FixedPointReference(c, block);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(absl::bit_cast<uint32_t>(got[i]), absl::bit_cast<uint32_t>(want[i]))
            << "V " << v << " block " << block << " element " << i << ": " << got[i] << " vs "
            << want[i];
      }
      // In place, over the first contribution.
      std::vector<float> first = c[0];
      all[0] = first.data();
      ExactSum::Reduce(v, block, all, n, first.data());
      EXPECT_EQ(std::memcmp(first.data(), want.data(), n * sizeof(float)), 0);
    }
  }
}

TEST(ExactSum, StartSumAloneRunsNow) {
  const auto c = Contributions(2, 3000, 21);
  const float* local[] = {c[0].data(), c[1].data()};
  std::vector<float> out(3000);
  ExactSum sum(nullptr, 2);
  EXPECT_FALSE(sum.overlaps());
  ASSERT_OK_AND_ASSIGN(CollectiveTicket t, sum.StartSum(local, 3000, out.data(), {}));
  EXPECT_EQ(t, 0u);
  EXPECT_EQ(out, SumInOrder(c, {0, 1}));
}

}  // namespace
}  // namespace lockstep
