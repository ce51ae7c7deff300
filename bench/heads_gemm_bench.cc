// Attention's per-head bfloat16 products at the example models' shapes, 2 threads:
// HeadsGemmBf16 (AVX-512 BF16 dot products, packed pairs) against oneDNN's one 4-D matmul
// call (DnnlMatmul), the path it replaces for small shapes. Args: T, head size D, samples,
// product (0: scores q k^T, 1: w v, 2: w^T do), 0 for oneDNN or 1 for HeadsGemmBf16.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/backend.h"
#include "core/bfloat16.h"
#include "workers/cpu/dnnl_matmul.h"
#include "workers/cpu/heads_gemm_bf16.h"

namespace lockstep {
namespace {

constexpr int kHeads = 4, kThreads = 2;

void BM_HeadsGemmBf16(benchmark::State& state) {
  const int t = state.range(0), d = state.range(1), b = state.range(2);
  const int product = state.range(3);
  const bool own = state.range(4) != 0;
  const int hd = kHeads * d;
  std::mt19937 gen(3);
  std::normal_distribution<float> dist;
  auto random16 = [&](size_t n) {
    std::vector<Bf16> v(n);
    for (Bf16& x : v) x.bits = Bf16Bits(dist(gen));
    return v;
  };
  const std::vector<Bf16> act = random16(size_t(b) * t * hd), act2 = random16(act.size());
  const std::vector<Bf16> w = random16(size_t(b) * kHeads * t * t);
  std::vector<float> out(std::max(act.size(), w.size()));
  using Op = Backend::HeadsOperand<const Bf16>;
  const Op heads{act.data(), hd, int64_t{t} * hd, d}, heads2{act2.data(), hd, int64_t{t} * hd, d};
  const Op weights{w.data(), t, int64_t{kHeads} * t * t, int64_t{t} * t};
  const bool to_weights = product == 0;
  const Backend::HeadsOperand<float> c =
      to_weights
          ? Backend::HeadsOperand<float>{out.data(), t, int64_t{kHeads} * t * t, int64_t{t} * t}
          : Backend::HeadsOperand<float>{out.data(), hd, int64_t{t} * hd, d};
  const bool ta = product == 2, tb = product == 0;
  const int m = t, n = to_weights ? t : d, k = to_weights ? d : t;
  const Op a = to_weights ? heads : weights, bb = to_weights ? heads2 : heads;
  cpu::DnnlMatmul dnnl(kThreads);
  for (auto _ : state) {
    if (own) {
      cpu::HeadsGemmBf16(kThreads, ta, tb, m, n, k, 1.0f, a, bb, 0.0f, c, b, kHeads);
    } else {
      const absl::Status s =
          dnnl.Run(ta, tb, m, n, k, 1.0f, a.p, a.ld, a.stride, bb.p, bb.ld, bb.stride, 0.0f, c.p,
                   c.ld, c.stride, b, kHeads, a.head, bb.head, c.head);
      if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GMAC/s"] = benchmark::Counter(
      double(m) * n * k * b * kHeads * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
// ViT (T 17, D 16, 128 samples), char transformer (T 128, D 32, 32 samples).
BENCHMARK(BM_HeadsGemmBf16)
    ->ArgsProduct({{17}, {16}, {128}, {0, 1, 2}, {0, 1}})
    ->ArgsProduct({{128}, {32}, {32}, {0, 1, 2}, {0, 1}})
    ->UseRealTime();

}  // namespace
}  // namespace lockstep

BENCHMARK_MAIN();
