// All-reduce time of GlooCollective with 2 ranks as threads on loopback: the CNN's
// gradient (824,458 floats) and small buffers, where latency dominates.
//
//   build/bench/gloo_allreduce_bench [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "core/collective.h"
#include "core/store.h"
#include "workers/gloo/gloo_collective.h"

namespace lockstep {
namespace {

constexpr int kRanks = 2;
constexpr int64_t kCnnGradientFloats = 824458;

// One job of kRanks ranks for the whole process, created on first use; nullptr for a rank
// that failed to join. Benchmark threads take the rank of their thread index.
Collective* Rank(int rank) {
  static auto* job = [] {
    static MemoryStore store;
    auto* collectives = new std::vector<std::unique_ptr<Collective>>(kRanks);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([collectives, r] {
        GlooOptions options;
        options.hostname = "127.0.0.1";
        options.prefix = "bench";
        options.connect_timeout = absl::Seconds(10);
        auto collective = GlooCollective::Create(r, kRanks, &store, options);
        if (collective.ok()) (*collectives)[r] = *std::move(collective);
      });
    }
    for (std::thread& t : threads) t.join();
    return collectives;
  }();
  return (*job)[rank].get();
}

void BM_GlooAllReduceSum(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  Collective* collective = Rank(state.thread_index());
  if (collective == nullptr) {
    state.SkipWithError("a rank failed to join");
    return;
  }
  std::vector<float> data(n, 0.0f);  // zeros stay zeros: no overflow, no denormals
  for (auto _ : state) {
    absl::Status status = collective->AllReduceSum(data.data(), n, {});
    if (!status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n * sizeof(float)));
}
BENCHMARK(BM_GlooAllReduceSum)
    ->ArgName("floats")
    ->Arg(1)
    ->Arg(1024)
    ->Arg(16384)
    ->Arg(262144)
    ->Arg(kCnnGradientFloats)
    ->Threads(kRanks)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace lockstep

BENCHMARK_MAIN();
