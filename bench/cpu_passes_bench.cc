// The CPU backend's memory-bound passes at the example models' shapes, 2 threads: a dense
// layer's bias gradient (column sums in double; bf16: with the bf16 copy of dy), its
// bfloat16 bias epilogue (the product rounded, the bias added, rounded, its bf16 twin),
// dropout (Threefry bits per element, the mask and the kept values), and a ResNet's
// bfloat16 BatchNorm apply and residual sum (each with its ReLU and bf16 twin).
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
  const bool bf16 = state.range(1) != 0;
  std::mt19937 gen(3);
  std::normal_distribution<float> d;
  std::vector<float> x(n), y(n);
  for (float& v : x) v = bf16 ? RoundBf16(d(gen)) : d(gen);
  std::vector<uint8_t> mask(n);
  const rng::Key key{1, 2};
  auto be = NewCpuBackend(2);
  for (auto _ : state) {
    const absl::Status s = bf16 ? be->DropoutBf16(1, n, 0.9f, &key, rng::Impl::kPartitionable,
                                                  x.data(), y.data(), mask.data())
                                : be->Dropout(n, 0.9f, &key, rng::Impl::kPartitionable, x.data(),
                                              y.data(), mask.data());
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * int64_t(n));
}
// A ViT block's dropouts (2,176 tokens of 64 and 128).
BENCHMARK(BM_Dropout)->ArgsProduct({{2176 * 64, 2176 * 128}, {0, 1}})->UseRealTime();

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

}  // namespace
}  // namespace lockstep

BENCHMARK_MAIN();
