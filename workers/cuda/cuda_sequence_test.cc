// The CUDA kernels of the sequence layers against the CPU backend (workers/cpu) on random
// data: bitwise where the arithmetic is the same float operations in the same order
// (the lookups, the embedding gradient, the broadcast adds and dropout, the softmax
// gradient, the class token and sequence pooling), within 1e-6 for the attention softmax (CUDA's
// expf is a few ulps from glibc's) and 1e-5 for the strided GEMMs (cuBLAS sums in another order).
// TF32 is off. Part of cuda_backend_test; without a GPU every test skips (cuda_testing.h).
#include <cstdint>
#include <random>
#include <tuple>

#include "workers/cuda/cuda_testing.h"

namespace lockstep {
namespace {

using testing::Bitwise;
using testing::CudaTest;
using testing::RandomFloats;
using testing::RelativeL2;

// n token ids in [0, vocab) as floats, drawn from the first `used` ids only (so that
// some table rows get no gradient) and so repeated many times.
std::vector<float> RandomIds(int n, int used, int seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(0, used - 1);
  std::vector<float> ids(n);
  for (float& id : ids) id = static_cast<float>(d(gen));
  return ids;
}

TEST_F(CudaTest, EmbedAndEmbedBackwardAreBitwiseWithRepeatedIds) {
  // features below and above one block's threads; n past one grid of blocks.
  for (const auto& [n, features, vocab, used] :
       {std::tuple{517, 24, 40, 31}, std::tuple{300, 300, 7, 5}, std::tuple{5000, 3, 256, 200}}) {
    const auto ids = RandomIds(n, used, n + features);
    const auto table = RandomFloats(size_t(vocab) * features, 40);
    const auto dy = RandomFloats(size_t(n) * features, 41);
    std::vector<float> out(size_t(n) * features), dtable(size_t(vocab) * features);
    EXPECT_OK(cpu_->Embed(n, features, ids.data(), table.data(), out.data()));
    EXPECT_OK(cpu_->EmbedBackward(n, features, vocab, ids.data(), dy.data(), dtable.data()));
    Buffer d_ids = ToDevice(ids), d_table = ToDevice(table), d_dy = ToDevice(dy);
    ASSERT_OK_AND_ASSIGN(Buffer d_out, cuda_->Allocate(out.size() * sizeof(float)));
    // Overwritten, not added to.
    Buffer d_dtable = ToDevice(std::vector<float>(dtable.size(), 7.0f));
    EXPECT_OK(cuda_->Embed(n, features, d_ids.as(), d_table.as(), d_out.as()));
    EXPECT_OK(cuda_->EmbedBackward(n, features, vocab, d_ids.as(), d_dy.as(), d_dtable.as()));
    const std::string what = std::to_string(n) + "x" + std::to_string(features);
    EXPECT_TRUE(Bitwise(ToHost(d_out, out.size()), out)) << what;
    const std::vector<float> got = ToHost(d_dtable, dtable.size());
    EXPECT_TRUE(Bitwise(got, dtable)) << what;
    // Rows of ids that never occur are zero (the CPU's are: the check is not vacuous).
    EXPECT_EQ(got.back(), 0.0f) << what;
    // The same bits run to run.
    EXPECT_OK(cuda_->EmbedBackward(n, features, vocab, d_ids.as(), d_dy.as(), d_dtable.as()));
    EXPECT_TRUE(Bitwise(ToHost(d_dtable, dtable.size()), got)) << what;
  }
}

TEST_F(CudaTest, AddRowsIsBitwiseInPlaceOrNot) {
  const int rows = 33, cols = 128 * 96;  // a position embedding: (batch, T * F)
  const auto x = RandomFloats(size_t(rows) * cols, 42), bias = RandomFloats(cols, 43);
  std::vector<float> y(x.size());
  EXPECT_OK(cpu_->AddRows(rows, cols, x.data(), bias.data(), y.data()));
  Buffer d_x = ToDevice(x), d_bias = ToDevice(bias);
  ASSERT_OK_AND_ASSIGN(Buffer d_y, cuda_->Allocate(y.size() * sizeof(float)));
  EXPECT_OK(cuda_->AddRows(rows, cols, d_x.as(), d_bias.as(), d_y.as()));
  EXPECT_TRUE(Bitwise(ToHost(d_y, y.size()), y));
  EXPECT_OK(cuda_->AddRows(rows, cols, d_x.as(), d_bias.as(), d_x.as()));
  EXPECT_TRUE(Bitwise(ToHost(d_x, y.size()), y));
}

// `count` products on a batch laid out with padded rows (ld past the row length) and gaps
// between the products (strides past their size), in every transposition. The whole
// buffers are compared: the padding that no product writes must stay as it was.
TEST_F(CudaTest, GemmStridedMatchesCpuInEveryTransposition) {
  const int m = 13, n = 9, k = 21, count = 4;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
      const int64_t sa = int64_t{ta ? k : m} * lda + 5, sb = int64_t{tb ? n : k} * ldb + 2,
                    sc = int64_t{m} * ldc + 1;
      const auto a = RandomFloats(count * sa, 44), b = RandomFloats(count * sb, 45);
      auto want = RandomFloats(count * sc, 46);
      Buffer d_a = ToDevice(a), d_b = ToDevice(b), d_c = ToDevice(want);
      EXPECT_OK(cpu_->GemmStrided(ta, tb, m, n, k, 0.7f, a.data(), lda, sa, b.data(), ldb, sb, 0.5f,
                                  want.data(), ldc, sc, count));
      EXPECT_OK(cuda_->GemmStrided(ta, tb, m, n, k, 0.7f, d_a.as(), lda, sa, d_b.as(), ldb, sb,
                                   0.5f, d_c.as(), ldc, sc, count));
      EXPECT_LE(RelativeL2(ToHost(d_c, want.size()), want), 1e-5) << "ta=" << ta << " tb=" << tb;
    }
  }
}

// The attention layer's own calls (core/step_attention.cc): heads interleaved in
// [T, H, D] (ld H * D, stride D), so the products' operands and outputs interleave.
TEST_F(CudaTest, GemmStridedMatchesCpuOnInterleavedHeads) {
  const int t = 16, h = 4, d = 8, hd = h * d, tt = t * t;
  const auto q = RandomFloats(size_t(t) * hd, 47), kv = RandomFloats(size_t(t) * hd, 48);
  std::vector<float> w(size_t(h) * tt), o(size_t(t) * hd, 3.0f);
  EXPECT_OK(cpu_->GemmStrided(false, true, t, t, d, 1.0f, q.data(), hd, d, kv.data(), hd, d, 0.0f,
                              w.data(), t, tt, h));
  EXPECT_OK(cpu_->GemmStrided(false, false, t, d, t, 1.0f, w.data(), t, tt, kv.data(), hd, d, 0.0f,
                              o.data(), hd, d, h));
  EXPECT_OK(cpu_->GemmStrided(true, false, t, d, t, 1.0f, w.data(), t, tt, q.data(), hd, d, 1.0f,
                              o.data(), hd, d, h));
  Buffer d_q = ToDevice(q), d_kv = ToDevice(kv), d_o = ToDevice(std::vector<float>(o.size(), 3.0f));
  ASSERT_OK_AND_ASSIGN(Buffer d_w, cuda_->Allocate(w.size() * sizeof(float)));
  EXPECT_OK(cuda_->GemmStrided(false, true, t, t, d, 1.0f, d_q.as(), hd, d, d_kv.as(), hd, d, 0.0f,
                               d_w.as(), t, tt, h));
  EXPECT_OK(cuda_->GemmStrided(false, false, t, d, t, 1.0f, d_w.as(), t, tt, d_kv.as(), hd, d, 0.0f,
                               d_o.as(), hd, d, h));
  EXPECT_OK(cuda_->GemmStrided(true, false, t, d, t, 1.0f, d_w.as(), t, tt, d_q.as(), hd, d, 1.0f,
                               d_o.as(), hd, d, h));
  EXPECT_LE(RelativeL2(ToHost(d_w, w.size()), w), 1e-5);
  EXPECT_LE(RelativeL2(ToHost(d_o, o.size()), o), 1e-5);
}

// SetTf32 governs the batched GEMMs as it does Gemm: TF32 rounds the inputs to 10
// mantissa bits (within about 1e-3 of float32, and not equal to it at this size, where
// cuBLAS runs tensor cores), and switching it off again gives float32's results.
TEST_F(CudaTest, GemmStridedFollowsTheTf32Setting) {
  const int m = 256, n = 256, k = 512, count = 2;
  const int64_t sa = int64_t{m} * k, sb = int64_t{k} * n, sc = int64_t{m} * n;
  const auto a = RandomFloats(count * sa, 54), b = RandomFloats(count * sb, 55);
  std::vector<float> want(count * sc);
  EXPECT_OK(cpu_->GemmStrided(false, false, m, n, k, 1.0f, a.data(), k, sa, b.data(), n, sb, 0.0f,
                              want.data(), n, sc, count));
  Buffer d_a = ToDevice(a), d_b = ToDevice(b);
  ASSERT_OK_AND_ASSIGN(Buffer d_c, cuda_->Allocate(want.size() * sizeof(float)));
  std::vector<float> got[2];
  for (const bool tf32 : {true, false}) {
    ASSERT_OK(cuda_->SetTf32(tf32));
    EXPECT_OK(cuda_->GemmStrided(false, false, m, n, k, 1.0f, d_a.as(), k, sa, d_b.as(), n, sb,
                                 0.0f, d_c.as(), n, sc, count));
    got[tf32] = ToHost(d_c, want.size());
  }
  EXPECT_LE(RelativeL2(got[true], want), 5e-3);
  EXPECT_FALSE(Bitwise(got[true], got[false]));
  EXPECT_LE(RelativeL2(got[false], want), 1e-5);
}

TEST_F(CudaTest, AttentionSoftmaxCausalAndNotWithin1e6) {
  const int t = 37, rows = 6 * t;  // (batch * heads) query rows of t
  auto s = RandomFloats(size_t(rows) * t, 49, 3.0f);
  s[5] = 1e30f;  // a huge score: the masked entries still come out 0
  for (const bool causal : {false, true}) {
    std::vector<float> want = s;
    EXPECT_OK(cpu_->AttentionSoftmax(rows, t, causal, want.data()));
    Buffer d_s = ToDevice(s);
    EXPECT_OK(cuda_->AttentionSoftmax(rows, t, causal, d_s.as()));
    const std::vector<float> got = ToHost(d_s, s.size());
    EXPECT_LE(RelativeL2(got, want), 1e-6) << "causal " << causal;
    int masked_nonzero = 0;  // weights past the query position
    for (int r = 0; r < rows; ++r) {
      for (int c = r % t + 1; c < t; ++c) masked_nonzero += got[size_t(r) * t + c] != 0.0f;
    }
    if (causal) {
      EXPECT_EQ(masked_nonzero, 0);
    } else {
      EXPECT_GT(masked_nonzero, 0);
    }
  }
}

TEST_F(CudaTest, SoftmaxBackwardIsBitwise) {
  const int rows = 500, cols = 37;
  std::vector<float> p = RandomFloats(size_t(rows) * cols, 50);
  EXPECT_OK(cpu_->AttentionSoftmax(rows, cols, false, p.data()));
  auto dp = RandomFloats(p.size(), 51);
  Buffer d_p = ToDevice(p), d_dp = ToDevice(dp);
  EXPECT_OK(cpu_->SoftmaxBackward(rows, cols, p.data(), dp.data()));
  EXPECT_OK(cuda_->SoftmaxBackward(rows, cols, d_p.as(), d_dp.as()));
  EXPECT_TRUE(Bitwise(ToHost(d_dp, dp.size()), dp));
}

TEST_F(CudaTest, MaskedScaleIsBitwiseInPlaceOrNot) {
  const int rows = 24, cols = 37 * 37;  // (batch * heads) copies of a [T, T] mask
  const float keep = 0.9f;
  std::mt19937 gen(52);
  std::vector<uint8_t> mask(cols);
  for (uint8_t& m : mask) m = std::bernoulli_distribution(keep)(gen) ? 1 : 0;
  const auto x = RandomFloats(size_t(rows) * cols, 53);
  std::vector<float> y(x.size());
  EXPECT_OK(cpu_->MaskedScale(rows, cols, mask.data(), keep, x.data(), y.data()));
  Buffer d_mask = ToDevice(mask), d_x = ToDevice(x);
  ASSERT_OK_AND_ASSIGN(Buffer d_y, cuda_->Allocate(y.size() * sizeof(float)));
  EXPECT_OK(cuda_->MaskedScale(rows, cols, d_mask.as<uint8_t>(), keep, d_x.as(), d_y.as()));
  EXPECT_TRUE(Bitwise(ToHost(d_y, y.size()), y));
  EXPECT_OK(cuda_->MaskedScale(rows, cols, d_mask.as<uint8_t>(), keep, d_x.as(), d_x.as()));
  EXPECT_TRUE(Bitwise(ToHost(d_x, y.size()), y));
}

TEST_F(CudaTest, ClassTokenAndItsGradientAreBitwise) {
  // A ViT's 49 patches of 64 features at batch 130 (the class token's sum over more than
  // one block of samples), and a small odd shape.
  for (const auto& [b, t, f] : {std::tuple{130, 49, 64}, std::tuple{3, 5, 300}}) {
    const auto cls = RandomFloats(f, 60), x = RandomFloats(size_t(b) * t * f, 61);
    const auto dy = RandomFloats(size_t(b) * (t + 1) * f, 62);
    std::vector<float> y(dy.size()), dx(x.size()), dcls(f);
    EXPECT_OK(cpu_->ClassToken(b, t, f, cls.data(), x.data(), y.data()));
    EXPECT_OK(cpu_->ClassTokenBackward(b, t, f, dy.data(), dx.data(), dcls.data()));
    Buffer d_cls = ToDevice(cls), d_x = ToDevice(x), d_dy = ToDevice(dy);
    ASSERT_OK_AND_ASSIGN(Buffer d_y, cuda_->Allocate(y.size() * sizeof(float)));
    ASSERT_OK_AND_ASSIGN(Buffer d_dx, cuda_->Allocate(dx.size() * sizeof(float)));
    Buffer d_dcls = ToDevice(std::vector<float>(f, 7.0f));  // overwritten, not added to
    EXPECT_OK(cuda_->ClassToken(b, t, f, d_cls.as(), d_x.as(), d_y.as()));
    EXPECT_OK(cuda_->ClassTokenBackward(b, t, f, d_dy.as(), d_dx.as(), d_dcls.as()));
    const std::string what = std::to_string(b) + "x" + std::to_string(t) + "x" + std::to_string(f);
    EXPECT_TRUE(Bitwise(ToHost(d_y, y.size()), y)) << what;
    EXPECT_TRUE(Bitwise(ToHost(d_dx, dx.size()), dx)) << what;
    EXPECT_TRUE(Bitwise(ToHost(d_dcls, dcls.size()), dcls)) << what;
    // Without dx (the input's gradient not wanted), dcls alone.
    EXPECT_OK(cuda_->ClassTokenBackward(b, t, f, d_dy.as(), nullptr, d_dcls.as()));
    EXPECT_TRUE(Bitwise(ToHost(d_dcls, dcls.size()), dcls)) << what;
  }
}

TEST_F(CudaTest, SequencePoolAndItsGradientAreBitwise) {
  for (const bool mean : {true, false}) {
    const int b = 130, t = 50, f = 64;
    const auto x = RandomFloats(size_t(b) * t * f, 63), dy = RandomFloats(size_t(b) * f, 64);
    std::vector<float> y(dy.size()), dx(x.size());
    EXPECT_OK(cpu_->SequencePool(mean, b, t, f, x.data(), y.data()));
    EXPECT_OK(cpu_->SequencePoolBackward(mean, b, t, f, dy.data(), dx.data()));
    Buffer d_x = ToDevice(x), d_dy = ToDevice(dy);
    ASSERT_OK_AND_ASSIGN(Buffer d_y, cuda_->Allocate(y.size() * sizeof(float)));
    Buffer d_dx = ToDevice(std::vector<float>(dx.size(), 7.0f));  // overwritten
    EXPECT_OK(cuda_->SequencePool(mean, b, t, f, d_x.as(), d_y.as()));
    EXPECT_OK(cuda_->SequencePoolBackward(mean, b, t, f, d_dy.as(), d_dx.as()));
    EXPECT_TRUE(Bitwise(ToHost(d_y, y.size()), y)) << (mean ? "mean" : "first");
    EXPECT_TRUE(Bitwise(ToHost(d_dx, dx.size()), dx)) << (mean ? "mean" : "first");
  }
}

}  // namespace
}  // namespace lockstep
