// cuDNN's fused attention (cudnn_attention.h) against the bfloat16 batched-GEMM path that
// multi_head_attention runs on CUDA (GemmStridedBf16, AttentionSoftmaxBf16 and
// SoftmaxBackward, as step_attention_bf16.cc chains them), causal and not: o, dq, dk and dv
// within bfloat16 tolerance of that path (relative L2 2e-2), and no less precise than it
// (error against a float64 host computation on the same bfloat16 inputs at most 1.5x the
// path's, its gradients rounded to bfloat16 as the step rounds them before their GEMMs);
// the same bits when run again (cuDNN's deterministic backward). Built only with cuDNN;
// skipped without a GPU. Compiled, not yet run on a GPU.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "workers/cuda/cuda_backend_impl.h"
#include "workers/cuda/cuda_testing.h"
#include "workers/cuda/cudnn_attention.h"

namespace lockstep {
namespace {

using testing::Bitwise;
using testing::CudaTest;
using testing::RandomFloats;
using testing::RelativeL2;

std::vector<float> Rounded(std::vector<float> v) {
  for (float& x : v) x = RoundBf16(x);
  return v;
}

std::vector<Bf16> AsBf16(const std::vector<float>& v) {
  std::vector<Bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i].bits = Bf16Bits(v[i]);
  return out;
}

std::vector<float> AsFloat(const std::vector<Bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16Float(v[i].bits);
  return out;
}

// o, dq, dk, dv, each [b, T, H, D].
struct Results {
  std::vector<float> o, dq, dk, dv;
};

// Element (sample, position, head, feature) of a [b, T, H, D] array.
size_t At(const AttentionShape& s, int n, int i, int h, int j) {
  return ((size_t(n) * s.t + i) * s.h + h) * s.d + j;
}

// The attention and its gradients in float64 on the host.
Results Exact(const AttentionShape& s, const std::vector<float>& q, const std::vector<float>& k,
              const std::vector<float>& v, const std::vector<float>& d_o) {
  const size_t n = q.size();
  Results r{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n),
            std::vector<float>(n)};
  std::vector<double> dk(n), dv(n), p(s.t), dp(s.t);
  for (int b = 0; b < s.b; ++b) {
    for (int h = 0; h < s.h; ++h) {
      for (int i = 0; i < s.t; ++i) {
        const int keys = s.causal ? i + 1 : s.t;
        double max = -INFINITY, sum = 0;
        for (int j = 0; j < keys; ++j) {
          double dot = 0;
          for (int e = 0; e < s.d; ++e) dot += double{q[At(s, b, i, h, e)]} * k[At(s, b, j, h, e)];
          p[j] = dot;
          max = std::max(max, dot);
        }
        for (int j = 0; j < keys; ++j) sum += p[j] = std::exp(p[j] - max);
        double pdp = 0;
        for (int j = 0; j < keys; ++j) {
          p[j] /= sum;
          double dot = 0;  // d p[j] = do . v[j]
          for (int e = 0; e < s.d; ++e)
            dot += double{d_o[At(s, b, i, h, e)]} * v[At(s, b, j, h, e)];
          dp[j] = dot;
          pdp += p[j] * dot;
        }
        for (int e = 0; e < s.d; ++e) {
          double o = 0, dq = 0;
          for (int j = 0; j < keys; ++j) {
            const double ds = p[j] * (dp[j] - pdp);
            o += p[j] * v[At(s, b, j, h, e)];
            dq += ds * k[At(s, b, j, h, e)];
            dk[At(s, b, j, h, e)] += ds * q[At(s, b, i, h, e)];
            dv[At(s, b, j, h, e)] += p[j] * d_o[At(s, b, i, h, e)];
          }
          r.o[At(s, b, i, h, e)] = static_cast<float>(o);
          r.dq[At(s, b, i, h, e)] = static_cast<float>(dq);
        }
      }
    }
  }
  for (size_t i = 0; i < n; ++i)
    r.dk[i] = static_cast<float>(dk[i]), r.dv[i] = static_cast<float>(dv[i]);
  return r;
}

class CudnnAttentionTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    const absl::Status bf16 = cuda_->Bf16Support();
    if (!bf16.ok()) GTEST_SKIP() << bf16.message();
    ASSERT_OK_AND_ASSIGN(sdpa_, CudnnAttention::Create(CudaBackend::From(cuda_.get())->stream()));
  }
  template <typename T>
  Buffer Allocate(size_t n) {
    absl::StatusOr<Buffer> b = cuda_->Allocate(n * sizeof(T));
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? std::move(b).value() : Buffer();
  }

  // The fused kernels' results.
  Results Fused(const AttentionShape& s, const Buffer& q, const Buffer& k, const Buffer& v,
                const Buffer& d_o) {
    const size_t n = size_t(s.b) * s.t * s.h * s.d;
    Buffer o = Allocate<Bf16>(n), stats = Allocate<float>(size_t(s.b) * s.h * s.t),
           dq = Allocate<Bf16>(n), dk = Allocate<Bf16>(n), dv = Allocate<Bf16>(n);
    EXPECT_OK(sdpa_->Forward(s, q.as<Bf16>(), k.as<Bf16>(), v.as<Bf16>(), o.as<Bf16>(),
                             stats.as<float>()));
    EXPECT_OK(sdpa_->Backward(s, q.as<Bf16>(), k.as<Bf16>(), v.as<Bf16>(), o.as<Bf16>(),
                              d_o.as<Bf16>(), stats.as<float>(), dq.as<Bf16>(), dk.as<Bf16>(),
                              dv.as<Bf16>()));
    return {AsFloat(ToHost<Bf16>(o, n)), AsFloat(ToHost<Bf16>(dq, n)), AsFloat(ToHost<Bf16>(dk, n)),
            AsFloat(ToHost<Bf16>(dv, n))};
  }

  // The batched-GEMM path's, each rounded to bfloat16 as the step rounds it next.
  Results Batched(const AttentionShape& s, const Buffer& q, const Buffer& k, const Buffer& v,
                  const Buffer& d_o) {
    const int t = s.t, h = s.h, d = s.d, hd = h * d;
    const int64_t sample = int64_t{t} * hd, tt = int64_t{t} * t;
    const size_t n = size_t(s.b) * sample, nw = size_t(s.b) * h * tt;
    Buffer w = Allocate<float>(nw), w16 = Allocate<Bf16>(nw), dw = Allocate<float>(nw),
           dw16 = Allocate<Bf16>(nw), o = Allocate<float>(n), dq = Allocate<float>(n),
           dk = Allocate<float>(n), dv = Allocate<float>(n);
    Backend& g = *cuda_;
    for (int b = 0; b < s.b; ++b) {
      EXPECT_OK(g.GemmStridedBf16(false, true, t, t, d, 1.0f, q.as<Bf16>() + b * sample, hd, d,
                                  k.as<Bf16>() + b * sample, hd, d, 0.0f, w.as() + b * h * tt, t,
                                  tt, h));
    }
    EXPECT_OK(g.AttentionSoftmaxBf16(s.b * h * t, t, s.causal, w.as()));
    EXPECT_OK(g.ToBf16(nw, w.as(), w16.as<Bf16>()));
    for (int b = 0; b < s.b; ++b) {
      EXPECT_OK(g.GemmStridedBf16(false, false, t, d, t, 1.0f, w16.as<Bf16>() + b * h * tt, t, tt,
                                  v.as<Bf16>() + b * sample, hd, d, 0.0f, o.as() + b * sample, hd,
                                  d, h));
      EXPECT_OK(g.GemmStridedBf16(false, true, t, t, d, 1.0f, d_o.as<Bf16>() + b * sample, hd, d,
                                  v.as<Bf16>() + b * sample, hd, d, 0.0f, dw.as() + b * h * tt, t,
                                  tt, h));
      EXPECT_OK(g.GemmStridedBf16(true, false, t, d, t, 1.0f, w16.as<Bf16>() + b * h * tt, t, tt,
                                  d_o.as<Bf16>() + b * sample, hd, d, 0.0f, dv.as() + b * sample,
                                  hd, d, h));
    }
    EXPECT_OK(g.SoftmaxBackward(s.b * h * t, t, w.as(), dw.as()));
    EXPECT_OK(g.ToBf16(nw, dw.as(), dw16.as<Bf16>()));
    for (int b = 0; b < s.b; ++b) {
      EXPECT_OK(g.GemmStridedBf16(false, false, t, d, t, 1.0f, dw16.as<Bf16>() + b * h * tt, t, tt,
                                  k.as<Bf16>() + b * sample, hd, d, 0.0f, dq.as() + b * sample, hd,
                                  d, h));
      EXPECT_OK(g.GemmStridedBf16(true, false, t, d, t, 1.0f, dw16.as<Bf16>() + b * h * tt, t, tt,
                                  q.as<Bf16>() + b * sample, hd, d, 0.0f, dk.as() + b * sample, hd,
                                  d, h));
    }
    return {Rounded(ToHost(o, n)), Rounded(ToHost(dq, n)), Rounded(ToHost(dk, n)),
            Rounded(ToHost(dv, n))};
  }

  std::unique_ptr<CudnnAttention> sdpa_;
};

TEST_F(CudnnAttentionTest, MatchesTheBatchedGemmPathWithinBf16AndRepeatsBitwise) {
  for (const AttentionShape& s :
       {AttentionShape{2, 64, 2, 64, false}, AttentionShape{2, 64, 2, 64, true},
        AttentionShape{3, 128, 4, 32, true}}) {
    SCOPED_TRACE(absl::StrCat(s.b, " x ", s.t, " positions, ", s.h, " heads of ", s.d,
                              s.causal ? ", causal" : ""));
    std::string why;
    ASSERT_TRUE(sdpa_->Supports(s, &why)) << why;
    const size_t n = size_t(s.b) * s.t * s.h * s.d;
    const auto q = Rounded(RandomFloats(n, 21, 0.25f)), k = Rounded(RandomFloats(n, 22)),
               v = Rounded(RandomFloats(n, 23)), d_o = Rounded(RandomFloats(n, 24));
    Buffer dq = ToDevice(AsBf16(q)), dk = ToDevice(AsBf16(k)), dv = ToDevice(AsBf16(v)),
           ddo = ToDevice(AsBf16(d_o));
    const Results fused = Fused(s, dq, dk, dv, ddo), batched = Batched(s, dq, dk, dv, ddo),
                  exact = Exact(s, q, k, v, d_o);
    for (const auto& [what, a, b, x] : {std::tuple{"o", &fused.o, &batched.o, &exact.o},
                                        {"dq", &fused.dq, &batched.dq, &exact.dq},
                                        {"dk", &fused.dk, &batched.dk, &exact.dk},
                                        {"dv", &fused.dv, &batched.dv, &exact.dv}}) {
      EXPECT_LE(RelativeL2(*a, *b), 2e-2) << what << " vs the batched-GEMM path";
      EXPECT_LE(RelativeL2(*a, *x), 1.5 * RelativeL2(*b, *x))
          << what << ": less precise than the batched-GEMM path";
    }
    const Results again = Fused(s, dq, dk, dv, ddo);
    EXPECT_TRUE(Bitwise(again.o, fused.o) && Bitwise(again.dq, fused.dq) &&
                Bitwise(again.dk, fused.dk) && Bitwise(again.dv, fused.dv))
        << "not the same bits when run again";
  }
}

}  // namespace
}  // namespace lockstep
