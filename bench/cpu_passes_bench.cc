// The CPU backend's memory-bound passes at the example models' shapes, 2 threads: a dense
// layer's bias gradient (column sums in double; bf16: with the bf16 copy of dy), its
// bfloat16 bias epilogue (the product rounded, the bias added, rounded, its bf16 twin),
// dropout (Threefry bits per element, the mask and the kept values), a ResNet's bfloat16
// BatchNorm apply and residual sum (each with its ReLU and bf16 twin) and BatchNorm's
// input gradient as bfloat16, and attention's bfloat16 scaled q and softmax backward.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/bfloat16.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

void BM_BiasGrad(benchmark::State& state) {
  const int rows = state.range(0), cols = state.range(1);
  const bool bf16 = state.range(2) != 0;
  std::mt19937 gen(1);
  std::normal_distribution<float> d;
  std::vector<float> dy(size_t(rows) * cols), db(cols);
  for (float& v : dy) v = d(gen);
  std::vector<Bf16> dy16(dy.size());
  auto be = NewCpuBackend(2);
  for (auto _ : state) {
    const absl::Status s = bf16 ? be->BiasGradBf16(rows, cols, dy.data(), db.data(), dy16.data())
                                : be->BiasGrad(rows, cols, dy.data(), db.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(db.data());
  }
  state.SetBytesProcessed(state.iterations() * int64_t{rows} * cols * (bf16 ? 6 : 4));
}
// ViT (2,176 tokens of 64 and 128), char transformer (4,096 of 128, 256 and 512).
BENCHMARK(BM_BiasGrad)
    ->ArgsProduct({{2176}, {64, 128}, {0, 1}})
    ->ArgsProduct({{4096}, {128, 256, 512}, {0, 1}})
    ->UseRealTime();

void BM_AddRowsBf16(benchmark::State& state) {
  const int rows = state.range(0), cols = state.range(1);
  std::mt19937 gen(2);
  std::normal_distribution<float> d;
  std::vector<float> x(size_t(rows) * cols), bias(cols), y(x.size());
  for (float& v : x) v = d(gen);
  for (float& v : bias) v = d(gen);
  std::vector<Bf16> y16(x.size());
  auto be = NewCpuBackend(2);
  for (auto _ : state) {
    const absl::Status s = be->AddRowsBf16(rows, cols, x.data(), bias.data(), y.data(), y16.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(y16.data());
  }
  state.SetBytesProcessed(state.iterations() * int64_t{rows} * cols * 10);
}
BENCHMARK(BM_AddRowsBf16)
    ->ArgsProduct({{2176}, {64, 128}})
    ->ArgsProduct({{4096}, {128, 512}})
    ->UseRealTime();

void BM_Dropout(benchmark::State& state) {
  const size_t n = state.range(0);
  const bool bf16 = state.range(1) != 0, twin = state.range(1) == 2;
  std::mt19937 gen(3);
  std::normal_distribution<float> d;
  std::vector<float> x(n), y(n);
  for (float& v : x) v = bf16 ? RoundBf16(d(gen)) : d(gen);
  std::vector<uint8_t> mask(n);
  std::vector<Bf16> y16(twin ? n : 0);
  const rng::Key key{1, 2};
  auto be = NewCpuBackend(2);
  for (auto _ : state) {
    const absl::Status s =
        bf16 ? be->DropoutBf16(1, n, 0.9f, &key, rng::Impl::kPartitionable, x.data(), y.data(),
                               mask.data(), twin ? y16.data() : nullptr)
             : be->Dropout(n, 0.9f, &key, rng::Impl::kPartitionable, x.data(), y.data(),
                           mask.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * int64_t(n));
}
// A ViT block's dropouts (2,176 tokens of 64 and 128): float32, bfloat16, bfloat16 with the
// twin its MLP's second dense reads.
BENCHMARK(BM_Dropout)->ArgsProduct({{2176 * 64, 2176 * 128}, {0, 1, 2}})->UseRealTime();

// LayerNorm (float32 in either dtype: a bfloat16 model's statistics and output too),
// forward (arg 0) and backward with its params' gradients (1): the ViT's 2,176 tokens of 64
// and the char transformer's 4,096 of 128.
void BM_LayerNorm(benchmark::State& state) {
  const int rows = state.range(0), cols = state.range(1);
  const bool backward = state.range(2) != 0;
  const size_t n = size_t(rows) * cols;
  std::mt19937 gen(9);
  std::normal_distribution<float> d;
  std::vector<float> x(n), dy(n), y(n), dx(n), scale(cols), bias(cols), mean(rows), rstd(rows);
  for (float& v : x) v = d(gen);
  for (float& v : dy) v = d(gen);
  for (float& v : scale) v = 1.0f + 0.1f * d(gen);
  std::vector<float> dscale(cols), dbias(cols);
  auto be = NewCpuBackend(2);
  absl::Status s = be->LayerNorm(rows, cols, 1e-6f, x.data(), scale.data(), bias.data(), y.data(),
                                 mean.data(), rstd.data());  // the backward's mean and rstd
  if (!s.ok()) state.SkipWithError(s.ToString().c_str());
  for (auto _ : state) {
    if (backward) {
      s = be->LayerNormBackward(rows, cols, x.data(), scale.data(), mean.data(), rstd.data(),
                                dy.data(), dx.data(), dscale.data(), dbias.data());
    } else {
      s = be->LayerNorm(rows, cols, 1e-6f, x.data(), scale.data(), bias.data(), y.data(),
                        mean.data(), rstd.data());
    }
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(backward ? dx.data() : y.data());
  }
  state.SetItemsProcessed(state.iterations() * int64_t(n));
}
BENCHMARK(BM_LayerNorm)
    ->ArgsProduct({{2176}, {64}, {0, 1}})
    ->Args({4096, 128, 0})
    ->Args({4096, 128, 1})
    ->UseRealTime();

// Attention's q divided by bf16(sqrt(D)) and rounded to bfloat16: the ViT's 2,176 tokens
// of 64, the char transformer's 4,096 of 128.
void BM_DivideBf16(benchmark::State& state) {
  const size_t n = state.range(0);
  std::mt19937 gen(8);
  std::normal_distribution<float> d;
  std::vector<float> x(n);
  for (float& v : x) v = RoundBf16(d(gen));
  std::vector<Bf16> y16(n);
  auto be = NewCpuBackend(2);
  for (auto _ : state) {
    const absl::Status s = be->DivideBf16(n, RoundBf16(4.0f), x.data(), y16.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(y16.data());
  }
  state.SetBytesProcessed(state.iterations() * int64_t(n) * 6);
}
BENCHMARK(BM_DivideBf16)->Arg(2176 * 64)->Arg(4096 * 128)->UseRealTime();

// The ResNet's activations: 128 images of 28 x 28 x 16, 14 x 14 x 32, 7 x 7 x 64.
#define LS_RESNET_SHAPES                     \
  ArgsProduct({{128 * 28 * 28}, {16}})       \
      ->ArgsProduct({{128 * 14 * 14}, {32}}) \
      ->ArgsProduct({{128 * 7 * 7}, {64}})

void BM_BatchNormApplyBf16(benchmark::State& state) {
  const int rows = state.range(0), cols = state.range(1);
  std::mt19937 gen(4);
  std::normal_distribution<float> d;
  std::vector<float> x(size_t(rows) * cols), y(x.size()), mean(cols), var(cols, 1.0f),
      scale(cols, 1.0f), bias(cols);
  for (float& v : x) v = d(gen);
  std::vector<Bf16> y16(x.size());
  auto be = NewCpuBackend(2);
  for (auto _ : state) {
    const absl::Status s = be->BatchNormApplyBf16(rows, cols, 1e-5f, x.data(), mean.data(),
                                                  var.data(), scale.data(), bias.data(),
                                                  /*relu=*/true, y.data(), y16.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(y16.data());
  }
  state.SetBytesProcessed(state.iterations() * int64_t{rows} * cols * 10);
}
BENCHMARK(BM_BatchNormApplyBf16)->LS_RESNET_SHAPES->UseRealTime();

void BM_BatchNormBackwardApplyBf16(benchmark::State& state) {
  const int rows = state.range(0), cols = state.range(1);
  std::mt19937 gen(7);
  std::normal_distribution<float> d;
  std::vector<float> x(size_t(rows) * cols), dy(x.size()), moments(2 * cols), var(cols, 1.0f),
      scale(cols, 1.0f), sums(2 * cols);
  for (float& v : x) v = d(gen);
  for (float& v : dy) v = d(gen);
  for (int c = 0; c < cols; ++c)
    moments[cols + c] = 1.0f, sums[c] = d(gen), sums[cols + c] = d(gen);
  std::vector<Bf16> dx16(x.size());
  auto be = NewCpuBackend(2);
  for (auto _ : state) {
    const absl::Status s =
        be->BatchNormBackwardApplyBf16(rows, cols, 1e-5f, 1, x.data(), dy.data(), moments.data(),
                                       var.data(), scale.data(), sums.data(), dx16.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(dx16.data());
  }
  state.SetBytesProcessed(state.iterations() * int64_t{rows} * cols * 10);
}
BENCHMARK(BM_BatchNormBackwardApplyBf16)->LS_RESNET_SHAPES->UseRealTime();

void BM_AddBf16(benchmark::State& state) {
  const int rows = state.range(0), cols = state.range(1);
  std::mt19937 gen(5);
  std::normal_distribution<float> d;
  std::vector<float> a(size_t(rows) * cols), b(a.size()), y(a.size());
  for (float& v : a) v = RoundBf16(d(gen));
  for (float& v : b) v = RoundBf16(d(gen));
  std::vector<Bf16> y16(a.size());
  auto be = NewCpuBackend(2);
  for (auto _ : state) {
    const absl::Status s =
        be->AddBf16(rows, cols, a.data(), b.data(), /*relu=*/true, y.data(), y16.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(y16.data());
  }
  state.SetBytesProcessed(state.iterations() * int64_t{rows} * cols * 14);
}
BENCHMARK(BM_AddBf16)->LS_RESNET_SHAPES->UseRealTime();

// Attention's softmax backward with its dropout mask (bf16: the masked gradient, the
// in-order double dot product per row, the bf16 result): the ViT's 128 x 4 rows of 17 x 17
// weights, the char transformer's 32 x 4 causal rows of 128 x 128.
void BM_SoftmaxBackwardBf16(benchmark::State& state) {
  const int t = state.range(0), rows = state.range(1) * t;
  const bool causal = state.range(2) != 0;
  const size_t n = size_t(rows) * t;
  std::mt19937 gen(6);
  std::normal_distribution<float> d;
  std::vector<float> p(n), dp(n);
  for (float& v : p) v = d(gen);
  for (float& v : dp) v = RoundBf16(d(gen));
  std::vector<uint8_t> mask(size_t(t) * t);
  for (uint8_t& m : mask) m = gen() % 10 != 0;
  std::vector<Bf16> dp16(n);
  auto be = NewCpuBackend(2);
  if (!be->AttentionSoftmaxBf16(rows, t, causal, p.data()).ok()) state.SkipWithError("softmax");
  const float scale = RoundBf16(1.0f / RoundBf16(0.9f));
  for (auto _ : state) {
    const absl::Status s = be->SoftmaxBackwardBf16(rows, t, causal, p.data(), mask.data(), scale,
                                                   dp.data(), dp16.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(dp16.data());
  }
  state.SetBytesProcessed(state.iterations() * int64_t(n) * 10);
}
BENCHMARK(BM_SoftmaxBackwardBf16)->Args({17, 128 * 4, 0})->Args({128, 32 * 4, 1})->UseRealTime();

}  // namespace
}  // namespace lockstep

BENCHMARK_MAIN();
