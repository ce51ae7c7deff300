// The exact sum's conversion kernels (exact_sum.cu) against their host references (the
// Backend defaults the CPU backend runs), bitwise, on values over every float exponent,
// subnormals, zeros, infinities and NaN; and DeviceExactSum on the GPU against ExactSum on
// the host, bitwise, in several orders of the contributions.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/exact_sum.h"
#include "core/exact_sum_device.h"
#include "workers/cuda/cuda_testing.h"

namespace lockstep {
namespace {

using testing::Bitwise;
using testing::CudaTest;

// n floats, each a uniform mantissa times 2^[lo, hi]; block 3 all zeros, block 4 one
// infinity, block 5 one NaN, block 6 subnormals only (blocks of `block`).
std::vector<float> Contribution(size_t n, size_t block, uint32_t seed, int lo = -149,
                                int hi = 127) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(lo, hi);
  std::vector<float> x(n);
  for (float& f : x) f = std::ldexp(mantissa(gen), exponent(gen));
  auto in_block = [&](size_t b, size_t i) { return b * block + i < n ? b * block + i : n - 1; };
  for (size_t i = 0; i < block; ++i) x[in_block(3, i)] = 0.0f;
  x[in_block(4, 7)] = std::numeric_limits<float>::infinity();
  x[in_block(5, 9)] = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 0; i < block; ++i) x[in_block(6, i)] = std::ldexp(mantissa(gen), -127);
  return x;
}

using CudaExactSumTest = CudaTest;

TEST_F(CudaExactSumTest, ConversionKernelsAreTheHostsBits) {
  const size_t block = 1024, n = 9 * block + 77;  // the last block partial
  const int headroom = 2;
  std::vector<std::vector<float>> x;
  for (uint32_t seed : {1u, 2u, 3u}) x.push_back(Contribution(n, block, seed, -60, 60));
  x.push_back(Contribution(n, block, 4));  // every exponent: the scale saturates some
  const size_t blocks = (n + block - 1) / block;
  std::vector<int64_t> want_e(blocks), want_fixed(n);
  std::vector<Buffer> dx;
  Buffer de = ToDevice(std::vector<int64_t>(blocks)), dfixed = ToDevice(std::vector<int64_t>(n));
  for (size_t j = 0; j < x.size(); ++j) {
    ASSERT_OK(cpu_->ExactBlockExponents(n, block, x[j].data(), j > 0, want_e.data()));
    dx.push_back(ToDevice(x[j]));
    ASSERT_OK(cuda_->ExactBlockExponents(n, block, dx[j].as(), j > 0, de.as<int64_t>()));
    EXPECT_EQ(ToHost<int64_t>(de, blocks), want_e) << "after contribution " << j;
  }
  EXPECT_EQ(want_e[3], ExactSum::kNonFinite);  // block 4 holds the first contribution's inf
  for (size_t j = 0; j < x.size(); ++j) {
    ASSERT_OK(cpu_->ExactToFixed(n, block, headroom, want_e.data(), x[j].data(), j > 0,
                                 want_fixed.data()));
    ASSERT_OK(cuda_->ExactToFixed(n, block, headroom, de.as<int64_t>(), dx[j].as(), j > 0,
                                  dfixed.as<int64_t>()));
    EXPECT_EQ(ToHost<int64_t>(dfixed, n), want_fixed) << "after contribution " << j;
  }
  std::vector<float> want(n);
  ASSERT_OK(
      cpu_->ExactFromFixed(n, block, headroom, want_e.data(), want_fixed.data(), want.data()));
  Buffer out = ToDevice(std::vector<float>(n));
  ASSERT_OK(
      cuda_->ExactFromFixed(n, block, headroom, de.as<int64_t>(), dfixed.as<int64_t>(), out.as()));
  EXPECT_TRUE(Bitwise(ToHost(out, n), want));
}

// Every block exponent, one block per float exponent: a block's largest |x| is 2^k times
// a mantissa in [0.5, 1), normal and subnormal.
TEST_F(CudaExactSumTest, BlockExponentsOfEveryFloatExponent) {
  const size_t block = 16;
  std::vector<float> x;
  for (int k = -149; k <= 128; ++k) {
    for (size_t i = 0; i < block; ++i) x.push_back(std::ldexp(i == 5 ? -0.75f : 0.5f, k - 1));
  }
  const size_t n = x.size(), blocks = n / block;
  std::vector<int64_t> want(blocks);
  ASSERT_OK(cpu_->ExactBlockExponents(n, block, x.data(), false, want.data()));
  Buffer dx = ToDevice(x), de = ToDevice(std::vector<int64_t>(blocks));
  ASSERT_OK(cuda_->ExactBlockExponents(n, block, dx.as(), false, de.as<int64_t>()));
  EXPECT_EQ(ToHost<int64_t>(de, blocks), want);
}

// DeviceExactSum on the GPU (no collective: this rank holds all V) is ExactSum's sum on
// the host, bitwise, whatever the order of the contributions.
TEST_F(CudaExactSumTest, DeviceExactSumIsTheHostsBitsInEveryOrder) {
  const int v = 4;
  const size_t n = 30011;
  std::vector<std::vector<float>> x;
  std::vector<Buffer> dx;
  for (int j = 0; j < v; ++j) {
    x.push_back(Contribution(n, ExactSum::kDefaultBlock, 10 + j, -30, 30));
    dx.push_back(ToDevice(x.back()));
  }
  std::vector<const float*> host;
  for (auto& c : x) host.push_back(c.data());
  std::vector<float> want(n);
  ExactSum exact(nullptr, v);
  ASSERT_OK(exact.Sum(host, n, want.data(), {}));
  DeviceExactSum device(cuda_.get(), nullptr, v);
  std::vector<int> order = {0, 1, 2, 3};
  Buffer out = ToDevice(std::vector<float>(n));
  do {
    std::vector<const float*> local;
    for (int j : order) local.push_back(dx[j].as());
    ASSERT_OK(device.Sum(local, n, out.as(), {}));
    ASSERT_TRUE(Bitwise(ToHost(out, n), want)) << "order " << order[0] << order[1] << order[2];
  } while (std::next_permutation(order.begin(), order.end()));
  // In place, into the first contribution (as the logical replicas' step sums).
  const std::vector<const float*> all = {dx[0].as(), dx[1].as(), dx[2].as(), dx[3].as()};
  ASSERT_OK(device.Sum(all, n, dx[0].as(), {}));
  EXPECT_TRUE(Bitwise(ToHost(dx[0], n), want));
}

}  // namespace
}  // namespace lockstep
