// The CPU backend's bfloat16 elementwise kernels: the rounding itself, the fused kernels
// bit for bit against the passes they replace, and the elementwise layers bit for bit
// against XLA's bfloat16 results (tests/golden/bf16_math.safetensors, written
// by tools/reference/golden_bf16.py). Skipped where the CPU has no bfloat16 kernels.
#include "workers/cpu/cpu_bf16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "core/io/safetensors.h"
#include "core/layer_math.h"
#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"
#include "workers/cpu/cpu_bf16_testing.h"
#include "workers/cpu/cpu_testing.h"

namespace lockstep {
namespace {

using testing::CpuBf16;
using testing::RandomNormal;
using testing::Rounded;
using testing::ToBf16;

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// The same bits, or both NaN (a NaN's sign and payload depend on the operands' order the
// compiler picks).
bool Same(float a, float b) {
  return FloatBits(a) == FloatBits(b) || (std::isnan(a) && std::isnan(b));
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(Bf16Bits(1.0f), 0x3f80);
  EXPECT_EQ(Bf16Bits(FromBits(0x3f808000)), 0x3f80);  // a tie: to the even 0x3f80
  EXPECT_EQ(Bf16Bits(FromBits(0x3f818000)), 0x3f82);  // a tie: to the even 0x3f82
  EXPECT_EQ(Bf16Bits(FromBits(0x3f808001)), 0x3f81);
  EXPECT_EQ(Bf16Bits(FromBits(0x3f807fff)), 0x3f80);
  EXPECT_EQ(Bf16Bits(-0.0f), 0x8000);
  EXPECT_EQ(Bf16Bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(Bf16Bits(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  EXPECT_EQ(Bf16Bits(FromBits(0x00018000)), 0x0002);               // subnormals kept
  EXPECT_TRUE(std::isnan(RoundBf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(RoundBf16(FromBits(0x7f800001))));  // a NaN that would round to inf
  EXPECT_EQ(RoundBf16(0.1f), 0.10009765625f);
}

TEST(Bf16, DropoutInOnePassIsTheThreeKernelsBitForBit) {
  // Backend::DropoutBf16's one CPU pass against its default (Dropout, DropoutBackward by
  // bf16(keep), AddRowsBf16), both key modes, in place or not, with the twin or without,
  // on 1 and 2 threads.
  const int rows = 37, cols = 1001;  // past the single-thread threshold; odd sizes
  const size_t n = size_t(rows) * cols;
  std::vector<float> x = RandomNormal(n, 21);
  for (float& v : x) v = RoundBf16(v);  // bfloat16 values, as the layer's input holds
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[6] = std::numeric_limits<float>::infinity();
  const rng::Key key{3, 7};
  for (rng::Impl impl : {rng::Impl::kPartitionable, rng::Impl::kLegacy}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, impl " << int(impl));
      auto be = NewCpuBackend(threads);
      std::vector<float> want(n), got(n), in_place = x;
      std::vector<uint8_t> want_mask(n), mask(n), mask2(n);
      std::vector<Bf16> want16(n), got16(n);
      ASSERT_OK(be->Backend::DropoutBf16(rows, cols, 0.9f, &key, impl, x.data(), want.data(),
                                         want_mask.data(), want16.data()));
      ASSERT_OK(be->DropoutBf16(rows, cols, 0.9f, &key, impl, x.data(), got.data(), mask.data(),
                                nullptr));
      ASSERT_OK(be->DropoutBf16(rows, cols, 0.9f, &key, impl, in_place.data(), in_place.data(),
                                mask2.data(), got16.data()));
      EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(in_place.data(), want.data(), n * sizeof(float)), 0);
      EXPECT_EQ(mask, want_mask);
      EXPECT_EQ(mask2, want_mask);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(got16[i].bits, want16[i].bits) << i;
        ASSERT_EQ(got16[i].bits, Bf16Bits(want[i])) << i;
      }
      const size_t kept = std::count(mask.begin(), mask.end(), uint8_t{1});
      EXPECT_GT(kept, n * 8 / 10);
      EXPECT_LT(kept, n);
    }
  }
}

TEST_F(CpuBf16, ToBf16IsRoundBf16OnAnyThreadCount) {
  const std::vector<float> x = RandomNormal(100003, 1);
  for (int threads : {1, 2}) {
    std::vector<Bf16> y(x.size());
    ASSERT_OK(NewCpuBackend(threads)->ToBf16(x.size(), x.data(), y.data()));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i].bits, Bf16Bits(x[i])) << i;
  }
}

TEST(Bf16, ToBf16RowsAndTwinAreTheirScalarFormulasOnAnyBits) {
  // Random bit patterns (NaNs, infinities, subnormals, ties among them) and the edge cases,
  // at every offset of the 16-wide vector loop and its tail.
  std::mt19937 gen(5);
  std::vector<float> x(4099);
  for (float& v : x) v = FromBits(static_cast<uint32_t>(gen()));
  const uint32_t edges[] = {0x3f808000, 0x3f818000, 0x7f800001, 0x7fffffff, 0xff800000,
                            0x00018000, 0x80000000, 0x7f7fffff, 0x7f7f8000, 0xffc00001};
  for (size_t i = 0; i < std::size(edges); ++i) x[17 * i + 3] = FromBits(edges[i]);
  std::vector<Bf16> y(x.size()), twin(x.size());
  cpu::ToBf16Rows(x.data(), y.data(), x.size());
  cpu::TwinBf16(x.data(), twin.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i].bits, Bf16Bits(x[i])) << i;
    ASSERT_EQ(twin[i].bits, cpu::TwinBits(x[i])) << i;
  }
}

TEST_F(CpuBf16, AddRowsRoundsTheProductsThenTheSum) {
  const int rows = 300, cols = 129;
  const std::vector<float> x = RandomNormal(size_t(rows) * cols, 2), bias = RandomNormal(cols, 3);
  std::vector<float> y(x.size()), same(x);
  std::vector<Bf16> twin(x.size());
  auto be = NewCpuBackend(2);
  ASSERT_OK(be->AddRowsBf16(rows, cols, x.data(), bias.data(), y.data(), twin.data()));
  ASSERT_OK(be->AddRowsBf16(rows, cols, same.data(), bias.data(), same.data(), nullptr));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const size_t i = size_t(r) * cols + c;
      ASSERT_EQ(y[i], RoundBf16(RoundBf16(x[i]) + RoundBf16(bias[c]))) << r << "," << c;
      ASSERT_EQ(twin[i].bits, Bf16Bits(y[i])) << r << "," << c;
    }
  }
  EXPECT_EQ(same, y);
  ASSERT_OK(be->AddRowsBf16(rows, cols, x.data(), nullptr, y.data(), nullptr));
  EXPECT_EQ(y, Rounded(x));
}

TEST_F(CpuBf16, AddRowsIsItsFormulaOnAnyBitsButNaNs) {
  // Random bit patterns: subnormals (which vcvtneps2bf16 would flush), infinities, ties,
  // zeros of both signs; NaNs left out (which operand's payload an add keeps is the
  // compiler's choice in the formula).
  std::mt19937 gen(7);
  auto random_bits = [&](size_t n) {
    std::vector<float> v(n);
    for (float& e : v) {
      do e = FromBits(static_cast<uint32_t>(gen()) >> (gen() % 2 == 0 ? 0 : 6));
      while (std::isnan(e));
    }
    return v;
  };
  const int rows = 37, cols = 51;
  const std::vector<float> x = random_bits(size_t(rows) * cols), bias = random_bits(cols);
  std::vector<float> y(x.size());
  std::vector<Bf16> twin(x.size());
  ASSERT_OK(
      NewCpuBackend(2)->AddRowsBf16(rows, cols, x.data(), bias.data(), y.data(), twin.data()));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const size_t i = size_t(r) * cols + c;
      const float want = RoundBf16(RoundBf16(x[i]) + RoundBf16(bias[c]));
      if (std::isnan(want)) continue;  // inf - inf
      ASSERT_EQ(FloatBits(y[i]), FloatBits(want)) << r << "," << c << ": " << x[i];
      ASSERT_EQ(twin[i].bits, Bf16Bits(want)) << r << "," << c;
    }
  }
}

// Every bfloat16 input (NaNs and infinities among them), shuffled, then float32 values
// that are not bfloat16 ones: each result its formula's bits, in place or not.
std::vector<float> EveryBf16ThenUnrounded() {
  std::vector<float> x(size_t{1} << 16);
  for (uint32_t b = 0; b < x.size(); ++b) x[b] = FromBits(b << 16);
  std::shuffle(x.begin(), x.end(), std::mt19937(5));
  const std::vector<float> unrounded = RandomNormal(10007, 6);
  x.insert(x.end(), unrounded.begin(), unrounded.end());
  return x;
}

constexpr Activation kActivations[] = {Activation::kGeluTanh, Activation::kGeluErf,
                                       Activation::kTanh, Activation::kSigmoid, Activation::kSilu};

TEST_F(CpuBf16, ActivationsAreTheirFormulaOnEveryInput) {
  const std::vector<float> x = EveryBf16ThenUnrounded();
  for (Activation a : kActivations) {
    for (int threads : {1, 2}) {
      auto be = NewCpuBackend(threads);
      std::vector<float> y(x.size()), same(x);
      std::vector<Bf16> twin(x.size());
      ASSERT_OK(be->ActivateBf16(a, x.size(), x.data(), y.data(), twin.data()));
      ASSERT_OK(be->ActivateBf16(a, same.size(), same.data(), same.data(), nullptr));
      for (size_t i = 0; i < x.size(); ++i) {
        const float want = math::ActivateBf16(a, x[i]);
        ASSERT_TRUE(Same(y[i], want)) << static_cast<int>(a) << " at " << x[i];
        ASSERT_TRUE(Same(same[i], want)) << static_cast<int>(a) << " at " << x[i];
        ASSERT_EQ(twin[i].bits, Bf16Bits(y[i])) << static_cast<int>(a) << " at " << x[i];
      }
    }
  }
}

// The float32 backward (a bfloat16 layer's too): bfloat16 inputs' derivatives come from
// a table, the others' from the formula; either way dy * math::ActivationDerivative(x).
TEST_F(CpuBf16, ActivationGradientsAreTheirFormulaOnEveryInput) {
  const std::vector<float> x = EveryBf16ThenUnrounded();
  const std::vector<float> dy = RandomNormal(x.size(), 15);
  for (Activation a : kActivations) {
    for (int threads : {1, 2}) {
      std::vector<float> dx = dy;
      ASSERT_OK(NewCpuBackend(threads)->ActivateBackward(a, x.size(), x.data(), dx.data()));
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_TRUE(Same(dx[i], dy[i] * math::ActivationDerivative(a, x[i])))
            << static_cast<int>(a) << " at " << x[i];
      }
    }
  }
}

TEST_F(CpuBf16, SoftmaxIsItsRowFormulaBitForBit) {
  const int t = 37, rows = 3 * t;
  std::vector<float> s = RandomNormal(size_t(rows) * t, 7);
  for (size_t i = 0; i < s.size(); ++i) s[i] *= 1.0f + float(i % 13);  // some rows' exps underflow
  s[5] = std::numeric_limits<float>::infinity();
  s[t + 3] = -std::numeric_limits<float>::infinity();
  s[2 * t + 1] = std::nanf("");
  for (bool causal : {false, true}) {
    std::vector<float> want = s;
    for (int r = 0; r < rows; ++r) math::SoftmaxRowBf16(causal ? r % t + 1 : t, t, &want[r * t]);
    for (int threads : {1, 2}) {
      std::vector<float> got = s;
      ASSERT_OK(NewCpuBackend(threads)->AttentionSoftmaxBf16(rows, t, causal, got.data()));
      for (size_t i = 0; i < s.size(); ++i)
        ASSERT_TRUE(Same(got[i], want[i])) << causal << " " << i;
    }
  }
}

// The fused attention-dropout kernels against the default's passes (MaskedScale,
// AddRowsBf16; MaskedScale, SoftmaxBackward, ToBf16), with and without the mask.
TEST_F(CpuBf16, AttentionDropoutKernelsAreTheirPassesBitForBit) {
  const int t = 29, blocks = 6, rows = blocks * t;
  const size_t n = size_t(rows) * t;
  std::vector<float> p = RandomNormal(n, 12);
  ASSERT_OK(NewCpuBackend(1)->AttentionSoftmaxBf16(rows, t, true, p.data()));
  const std::vector<float> dp = RandomNormal(n, 13);
  std::vector<uint8_t> mask(size_t(t) * t);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = (i * 7919) % 10 < 8;
  const float scale = RoundBf16(1.0f / RoundBf16(0.8f));
  for (int threads : {1, 2}) {
    auto be = NewCpuBackend(threads);
    std::vector<float> room(n), want(n);
    std::vector<Bf16> got16(n), want16(n);
    ASSERT_OK(be->MaskedScaleBf16(blocks, t * t, mask.data(), scale, p.data(), room.data(),
                                  got16.data()));
    ASSERT_OK(be->Backend::MaskedScaleBf16(blocks, t * t, mask.data(), scale, p.data(), want.data(),
                                           want16.data()));
    EXPECT_EQ(0, std::memcmp(got16.data(), want16.data(), n * sizeof(Bf16)));
    // p is causal: summing each row's first r % t + 1 products alone gives the same bits.
    for (const uint8_t* m : std::vector<const uint8_t*>{nullptr, mask.data()}) {
      for (const bool causal : {false, true}) {
        std::vector<float> got_room = dp, want_room = dp;
        ASSERT_OK(be->SoftmaxBackwardBf16(rows, t, causal, p.data(), m, scale, got_room.data(),
                                          got16.data()));
        ASSERT_OK(be->Backend::SoftmaxBackwardBf16(rows, t, false, p.data(), m, scale,
                                                   want_room.data(), want16.data()));
        EXPECT_EQ(0, std::memcmp(got16.data(), want16.data(), n * sizeof(Bf16)))
            << (m != nullptr) << causal;
      }
    }
  }
}

TEST_F(CpuBf16, BiasGradWithItsBf16GradientIsTheTwoPassesBitForBit) {
  for (const int rows : {7, 3001}) {  // one block of sums, then eight
    const int cols = 37;
    const std::vector<float> dy = RandomNormal(size_t(rows) * cols, 14);
    for (int threads : {1, 2}) {
      auto be = NewCpuBackend(threads);
      std::vector<float> db(cols), want(cols);
      std::vector<Bf16> dy16(dy.size()), want16(dy.size());
      ASSERT_OK(be->BiasGradBf16(rows, cols, dy.data(), db.data(), dy16.data()));
      ASSERT_OK(be->Backend::BiasGradBf16(rows, cols, dy.data(), want.data(), want16.data()));
      EXPECT_EQ(db, want);
      EXPECT_EQ(0, std::memcmp(dy16.data(), want16.data(), dy.size() * sizeof(Bf16)));
      std::fill(dy16.begin(), dy16.end(), Bf16{0});
      ASSERT_OK(be->BiasGradBf16(rows, cols, dy.data(), nullptr, dy16.data()));  // no bias
      EXPECT_EQ(0, std::memcmp(dy16.data(), want16.data(), dy.size() * sizeof(Bf16)));
    }
  }
}

TEST_F(CpuBf16, DivideBf16IsDivideThenToBf16BitForBit) {
  for (const size_t n : {size_t{1001}, size_t{100003}}) {  // one thread, then split
    const std::vector<float> x = Rounded(RandomNormal(n, 19));
    const float d = RoundBf16(std::sqrt(32.0f));
    for (int threads : {1, 2}) {
      auto be = NewCpuBackend(threads);
      std::vector<float> room = x, want = x;
      std::vector<Bf16> y16(n), want16(n);
      ASSERT_OK(be->DivideBf16(n, d, room.data(), y16.data()));
      ASSERT_OK(be->Backend::DivideBf16(n, d, want.data(), want16.data()));
      EXPECT_EQ(0, std::memcmp(y16.data(), want16.data(), n * sizeof(Bf16)));
    }
  }
}

TEST_F(CpuBf16, ReluKeepsItsBf16Twin) {
  const std::vector<float> x = Rounded(RandomNormal(70001, 11));
  std::vector<float> y = x;
  std::vector<Bf16> twin(x.size());
  ASSERT_OK(NewCpuBackend(2)->ReluBf16(y.size(), y.data(), twin.data()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i], std::max(x[i], 0.0f)) << i;
    ASSERT_EQ(twin[i].bits, Bf16Bits(y[i])) << i;
  }
}

TEST_F(CpuBf16, AddWithReluIsItsTernaryOnSpecialValues) {
  // NaNs, signed zeros, infinities, subnormals (rounded by the integer formula) and
  // ordinary values, at every lane of a vector and in its tail: y = relu(bf16(a + b)),
  // the ReLU `v > 0 ? v : 0` (+0 for a NaN and -0), the twin its upper half.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> specials = {
      std::nanf(""),        -std::nanf(""),       -0.0f, 0.0f,   inf,     -inf,
      FromBits(0x00012345), FromBits(0x80012345), 1.5f,  -2.25f, 3.0e38f, -1.0e-39f};
  std::vector<float> a, b;
  for (float x : specials) {
    for (float y : specials) a.push_back(x), b.push_back(y);
  }
  a.push_back(-1.0f), b.push_back(0.5f);  // a tail of one
  for (const bool relu : {false, true}) {
    std::vector<float> out(a.size());
    std::vector<Bf16> twin(a.size());
    ASSERT_OK(NewCpuBackend(1)->AddBf16(1, static_cast<int>(a.size()), a.data(), b.data(), relu,
                                        out.data(), twin.data()));
    for (size_t i = 0; i < a.size(); ++i) {
      const float v = RoundBf16(a[i] + b[i]);
      const float want = relu ? (v > 0.0f ? v : 0.0f) : v;
      if (std::isnan(want)) {  // which operand's payload an add keeps is the compiler's choice
        ASSERT_TRUE(std::isnan(out[i])) << i;
        continue;
      }
      ASSERT_EQ(FloatBits(out[i]), FloatBits(want)) << relu << " " << a[i] << " + " << b[i];
      ASSERT_EQ(twin[i].bits, cpu::TwinBits(want)) << relu << " " << a[i] << " + " << b[i];
    }
  }
}

TEST_F(CpuBf16, FusedBatchNormAndAddAreTheirPassesBitForBit) {
  // BatchNormApplyBf16 and AddBf16 in one pass against Backend's defaults (the float32
  // kernel, AddRowsBf16, then ReluBf16 or Relu), with and without the ReLU and the twin,
  // on 1 and 2 threads, past kParallelMin elements.
  const int rows = 1031, cols = 48;
  const size_t n = size_t(rows) * cols;
  const std::vector<float> x = Rounded(RandomNormal(n, 14)), r = Rounded(RandomNormal(n, 15));
  const std::vector<float> mean = RandomNormal(cols, 16), scale = RandomNormal(cols, 17);
  const std::vector<float> bias = RandomNormal(cols, 18);
  std::vector<float> var = RandomNormal(cols, 19);
  for (float& v : var) v = v * v;
  for (int threads : {1, 2}) {
    auto be = NewCpuBackend(threads);
    for (bool relu : {false, true}) {
      for (bool twin : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << threads << " threads, relu " << relu << ", twin " << twin);
        std::vector<float> y(n), want(n);
        std::vector<Bf16> y16(n), want16(n);
        Bf16* t = twin ? y16.data() : nullptr;
        Bf16* wt = twin ? want16.data() : nullptr;
        ASSERT_OK(be->BatchNormApplyBf16(rows, cols, 1e-5f, x.data(), mean.data(), var.data(),
                                         scale.data(), bias.data(), relu, y.data(), t));
        ASSERT_OK(be->Backend::BatchNormApplyBf16(rows, cols, 1e-5f, x.data(), mean.data(),
                                                  var.data(), scale.data(), bias.data(), relu,
                                                  want.data(), wt));
        EXPECT_EQ(0, std::memcmp(y.data(), want.data(), n * sizeof(float)));
        EXPECT_EQ(0, std::memcmp(y16.data(), want16.data(), n * sizeof(Bf16)));
        ASSERT_OK(be->AddBf16(rows, cols, x.data(), r.data(), relu, y.data(), t));
        ASSERT_OK(be->Backend::AddBf16(rows, cols, x.data(), r.data(), relu, want.data(), wt));
        EXPECT_EQ(0, std::memcmp(y.data(), want.data(), n * sizeof(float)));
        EXPECT_EQ(0, std::memcmp(y16.data(), want16.data(), n * sizeof(Bf16)));
        if (relu) {
          EXPECT_EQ(*std::min_element(y.begin(), y.end()), 0.0f);
        }
      }
    }
  }
}

// XLA's bfloat16 results (bf16_math.safetensors).
class CpuBf16Math : public CpuBf16 {
 protected:
  void SetUp() override {
    CpuBf16::SetUp();
    if (IsSkipped()) return;
    ASSERT_OK_AND_ASSIGN(golden_, SafeTensors::Read(testing::GoldenPath("bf16_math.safetensors")));
  }
  std::vector<float> Bits(const std::string& name) const {
    const SafeTensor& t = golden_.tensors().at(name);
    std::vector<float> out(t.data.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t b;
      std::memcpy(&b, t.data.data() + 2 * i, 2);
      out[i] = Bf16Float(b);
    }
    return out;
  }
  // The elements where got and want differ (NaNs equal).
  static int Mismatches(const std::vector<float>& got, const std::vector<float>& want) {
    int n = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      n += !(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])));
    }
    return n;
  }
  SafeTensors golden_;
};

TEST_F(CpuBf16Math, ActivationsRoundEveryOpAsXla) {
  const std::vector<float> x = Bits("act.x");
  const std::pair<const char*, Activation> acts[] = {{"gelu_tanh", Activation::kGeluTanh},
                                                     {"gelu_erf", Activation::kGeluErf},
                                                     {"tanh", Activation::kTanh},
                                                     {"sigmoid", Activation::kSigmoid},
                                                     {"silu", Activation::kSilu}};
  auto be = NewCpuBackend(2);
  for (const auto& [name, a] : acts) {
    std::vector<float> y(x.size());
    std::vector<Bf16> twin(x.size());
    ASSERT_OK(be->ActivateBf16(a, x.size(), x.data(), y.data(), twin.data()));
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(twin[i].bits, Bf16Bits(y[i])) << name << i;
    const int wrong = Mismatches(y, Bits(std::string("act.") + name));
    std::printf("  %-9s %d of %zu differ from XLA's\n", name, wrong, x.size());
    // XLA's float32 exp, tanh and erfc round an ulp otherwise than libm now and then, and
    // a bfloat16 rounding of such a result can differ: at most 1 in 200.
    EXPECT_LE(wrong, static_cast<int>(x.size() / 200)) << name;
  }
}

TEST_F(CpuBf16Math, SoftmaxPoolsAndDenseAsXla) {
  auto be = NewCpuBackend(2);
  for (bool causal : {false, true}) {
    std::vector<float> s = *golden_.F32("softmax.x");
    ASSERT_OK(be->AttentionSoftmaxBf16(64, 40, causal, s.data()));
    const int wrong = Mismatches(s, Bits(causal ? "softmax.causal" : "softmax.y"));
    std::printf("  softmax%s %d of %zu differ from XLA's\n", causal ? " (causal)" : "", wrong,
                s.size());
    EXPECT_LE(wrong, static_cast<int>(s.size() / 50));
  }
  const std::vector<float> p = *golden_.F32("pool.x");
  ConvGeometry three{2, 9, 9, 4, 4, 3, 3};
  three.stride_h = three.stride_w = 3;
  std::vector<float> y(2 * 3 * 3 * 4);
  ASSERT_OK(be->AvgPoolBf16(three, true, p.data(), y.data()));
  EXPECT_EQ(Mismatches(y, Bits("pool.avg3")), 0);
  ConvGeometry two{2, 9, 9, 4, 4, 2, 2};  // SAME, stride 1: padding after
  two.pad_bottom = two.pad_right = 1;
  y.resize(2 * 9 * 9 * 4);
  ASSERT_OK(be->AvgPoolBf16(two, true, p.data(), y.data()));
  EXPECT_EQ(Mismatches(y, Bits("pool.avg2")), 0);

  const std::vector<float> x = *golden_.F32("dense.x"), k = *golden_.F32("dense.kernel");
  const std::vector<float> bias = *golden_.F32("dense.bias");
  const std::vector<Bf16> x16 = ToBf16(x), k16 = ToBf16(k);
  std::vector<float> d(64 * 48);
  ASSERT_OK(be->GemmBf16(false, false, 64, 48, 96, 1.0f, x16.data(), k16.data(), 0.0f, d.data()));
  ASSERT_OK(be->AddRowsBf16(64, 48, d.data(), bias.data(), d.data(), nullptr));
  const int wrong = Mismatches(d, Bits("dense.y"));
  std::printf("  dense     %d of %zu differ from XLA's\n", wrong, d.size());
  // The float32 sums' order differs from XLA's: their bfloat16 roundings rarely do.
  EXPECT_LE(wrong, static_cast<int>(d.size() / 100));
}

}  // namespace
}  // namespace lockstep
