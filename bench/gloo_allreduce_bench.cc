// The data plane's all-reduce against raw Gloo (issue 23): 2 ranks as threads of this
// process on loopback TCP, float32 sums of 4 KiB to 64 MiB (and the MLP's 2.68 MB and the
// CNN's 3.30 MB of gradients). Lockstep's ranks join through its bootstrap (the
// authenticated mesh of workers/gloo/auth_transport.h, tcp_mesh.h); raw Gloo's through
// Gloo's own (its TCP device and connectFullMesh, over the same kind of store). Per size:
//   Lockstep/...        GlooCollective::AllreduceSum through its QueuedCollective, the
//                       worker's synchronous path, over TCP (shared_memory off: ranks on
//                       different hosts);
//   LockstepStarted/... StartAllReduceSum + Wait, the path of a bucket overlapping backward
//                       (the communication thread's hand-off included), over TCP;
//   LockstepShm/...     AllreduceSum where the ranks share a host (the default there): the
//                       shared-memory path (workers/gloo/shm_allreduce.h), same bits;
//   RawGloo/...         gloo::allreduce (ring, Gloo's default options, gloo::sum<float>)
//                       on Gloo's own TCP transport;
//   RawGlooRing/...     gloo::AllreduceRing<float>, buffers registered once per run;
//   ExactSum/...        core/exact_sum.h's order-independent sum over the same
//                       collective (a max all-reduce of one int64 per 1024 floats, the
//                       conversions, an int64 sum all-reduce: twice the bytes), one
//                       contribution per rank (docs/elastic.md), over TCP;
//   ExactSumShm/...     the same where the ranks share a host: the ranks trade their
//                       contributions on the shared-memory path and each reduces half
//                       (Collective::AllReduceBy, ExactSum::Reduce), same bits;
//   ExactSumReduce/...  ExactSum::Reduce alone, no collective: each rank's thread
//                       reducing two contributions of n/2 floats, its share of
//                       ExactSumShm's arithmetic.
// The counter bus_bw is the achieved bus bandwidth, 2(n-1)/n * bytes / time (n = 2:
// bytes / time), in bytes/s. Run the variants interleaved, the machine being shared:
//
//   build/bench/gloo_allreduce_bench --benchmark_repetitions=5
//       --benchmark_enable_random_interleaving=true
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/collective.h"
#include "core/exact_sum.h"
#include "core/store.h"
#include "gloo/allreduce.h"
#include "gloo/allreduce_ring.h"
#include "gloo/context.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "workers/gloo/gloo_collective.h"
#include "workers/gloo/gloo_store.h"

namespace lockstep {
namespace {

constexpr int kRanks = 2;
constexpr int64_t kMlpGradientFloats = 669706;  // 784-512-512-10
constexpr int64_t kCnnGradientFloats = 824458;  // the Flax MNIST CNN

GlooOptions Options(const std::string& prefix) {
  GlooOptions options;
  options.hostname = "127.0.0.1";
  options.prefix = prefix;
  options.connect_timeout = absl::Seconds(30);
  return options;
}

// Runs make(rank) for every rank on a thread of its own (they join one mesh together).
template <typename T, typename Make>
std::vector<T>* JoinAll(Make make) {
  auto* joined = new std::vector<T>(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) threads.emplace_back([=] { (*joined)[r] = make(r); });
  for (std::thread& t : threads) t.join();
  return joined;
}

MemoryStore& SharedStore() {
  static auto* store = new MemoryStore;
  return *store;
}

// The collective of `rank` (the worker's: a QueuedCollective around GlooCollective) over
// TCP or shared memory, created on first use; nullptr for a rank that failed to join.
std::vector<std::unique_ptr<Collective>>* LockstepJob(bool shared_memory) {
  return JoinAll<std::unique_ptr<Collective>>([shared_memory](int r) {
    GlooOptions options = Options(shared_memory ? "lockstep-shm" : "lockstep");
    options.shared_memory = shared_memory;
    auto collective = GlooCollective::Create(r, kRanks, &SharedStore(), options);
    return collective.ok() ? *std::move(collective) : nullptr;
  });
}
Collective* LockstepRank(int rank, bool shared_memory = false) {
  static auto* tcp = LockstepJob(false);
  static auto* shm = LockstepJob(true);
  return (shared_memory ? *shm : *tcp)[rank].get();
}

// A raw Gloo context of `rank`: Gloo's TCP device on loopback, its full mesh connected
// through Gloo's rendezvous over the shared store; nullptr for a rank that failed to join.
std::shared_ptr<gloo::Context> RawRank(int rank) {
  static auto* job = JoinAll<std::shared_ptr<gloo::Context>>([](int r) {
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto context = std::make_shared<gloo::rendezvous::Context>(r, kRanks);
      gloo_internal::GlooStore store(&SharedStore(), absl::Now() + absl::Seconds(30));
      gloo::rendezvous::PrefixStore prefixed("raw", store);
      std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
      context->connectFullMesh(prefixed, device);
      return std::shared_ptr<gloo::Context>(std::move(context));
    } catch (const std::exception&) {
      return std::shared_ptr<gloo::Context>();
    }
  });
  return (*job)[rank];
}

void SetCounters(benchmark::State& state, size_t n) {
  const double bytes = static_cast<double>(n * sizeof(float));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  state.counters["bus_bw"] = benchmark::Counter(
      2.0 * (kRanks - 1) / kRanks * bytes,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kAvgThreads);
}

size_t Floats(const benchmark::State& state) { return static_cast<size_t>(state.range(0)); }

void RunLockstep(benchmark::State& state, bool shared_memory) {
  const size_t n = Floats(state);
  Collective* collective = LockstepRank(state.thread_index(), shared_memory);
  if (collective == nullptr) return state.SkipWithError("a rank failed to join");
  std::vector<float> data(n, 0.0f);  // zeros stay zeros: no overflow, no denormals
  for (auto _ : state) {
    absl::Status status = collective->AllReduceSum(data.data(), n, {});
    if (!status.ok()) return state.SkipWithError(std::string(status.message()).c_str());
  }
  SetCounters(state, n);
}
void BM_Lockstep(benchmark::State& state) { RunLockstep(state, false); }
void BM_LockstepShm(benchmark::State& state) { RunLockstep(state, true); }

void BM_LockstepStarted(benchmark::State& state) {
  const size_t n = Floats(state);
  Collective* collective = LockstepRank(state.thread_index());
  if (collective == nullptr) return state.SkipWithError("a rank failed to join");
  std::vector<float> data(n, 0.0f);
  for (auto _ : state) {
    absl::StatusOr<CollectiveTicket> ticket = collective->StartAllReduceSum(data.data(), n, {});
    absl::Status status = ticket.ok() ? collective->Wait(*ticket) : ticket.status();
    if (!status.ok()) return state.SkipWithError(std::string(status.message()).c_str());
  }
  SetCounters(state, n);
}

void BM_RawGloo(benchmark::State& state) {
  const size_t n = Floats(state);
  std::shared_ptr<gloo::Context> context = RawRank(state.thread_index());
  if (context == nullptr) return state.SkipWithError("a rank failed to join");
  std::vector<float> data(n, 0.0f);
  using Fn = void (*)(void*, const void*, const void*, size_t);
  for (auto _ : state) {
    gloo::AllreduceOptions options(context);
    options.setOutput(data.data(), n);
    options.setReduceFunction(static_cast<Fn>(&gloo::sum<float>));
    gloo::allreduce(options);
  }
  SetCounters(state, n);
}

void BM_RawGlooRing(benchmark::State& state) {
  const size_t n = Floats(state);
  std::shared_ptr<gloo::Context> context = RawRank(state.thread_index());
  if (context == nullptr) return state.SkipWithError("a rank failed to join");
  std::vector<float> data(n, 0.0f);
  gloo::AllreduceRing<float> ring(context, {data.data()}, static_cast<int>(n));
  for (auto _ : state) ring.run();
  SetCounters(state, n);
}

void RunExactSum(benchmark::State& state, Collective* collective) {
  const size_t n = Floats(state);
  // Values of mixed magnitudes (the conversions' cost does not depend on them).
  std::vector<float> data(n), out(n);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<float>(i % 1000) * 1e-3f - 0.5f;
  ExactSum sum(collective, kRanks);
  const float* local[] = {data.data()};
  for (auto _ : state) {
    absl::Status status = sum.Sum(local, n, out.data(), {});
    if (!status.ok()) return state.SkipWithError(std::string(status.message()).c_str());
  }
  SetCounters(state, n);
}
void RunExactSumOnJob(benchmark::State& state, bool shared_memory) {
  Collective* collective = LockstepRank(state.thread_index(), shared_memory);
  if (collective == nullptr) return state.SkipWithError("a rank failed to join");
  RunExactSum(state, collective);
}
void BM_ExactSum(benchmark::State& state) { RunExactSumOnJob(state, false); }
void BM_ExactSumShm(benchmark::State& state) { RunExactSumOnJob(state, true); }
void BM_ExactSumReduce(benchmark::State& state) {
  const size_t n = Floats(state) / 2;
  std::vector<float> a(n), b(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000) * 1e-3f - 0.5f;
    b[i] = static_cast<float>(i % 997) * 1e-3f - 0.5f;
  }
  const float* all[] = {a.data(), b.data()};
  for (auto _ : state) ExactSum::Reduce(kRanks, ExactSum::kDefaultBlock, all, n, out.data());
  SetCounters(state, Floats(state));
}

void Sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("floats");
  for (int64_t bytes = 4 << 10; bytes <= 64 << 20; bytes *= 4) b->Arg(bytes / 4);
  b->Arg(kMlpGradientFloats);
  b->Arg(kCnnGradientFloats);
  // Time: wall time per all-reduce; CPU: the whole process's (both ranks, raw Gloo's
  // device threads and Lockstep's communication threads), which a loaded machine skews
  // less than it does the wall time.
  b->Threads(kRanks)->UseRealTime()->MeasureProcessCPUTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_Lockstep)->Apply(Sizes);
BENCHMARK(BM_LockstepShm)->Apply(Sizes);
BENCHMARK(BM_LockstepStarted)->Apply(Sizes);
BENCHMARK(BM_RawGloo)->Apply(Sizes);
BENCHMARK(BM_RawGlooRing)->Apply(Sizes);
BENCHMARK(BM_ExactSum)->Apply(Sizes);
BENCHMARK(BM_ExactSumShm)->Apply(Sizes);
BENCHMARK(BM_ExactSumReduce)->Apply(Sizes);

}  // namespace
}  // namespace lockstep

BENCHMARK_MAIN();
