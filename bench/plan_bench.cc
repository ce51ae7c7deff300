// plan_bench: what the coordinator computes for each step it sends (TrainingPlan::Next):
// a step's plan, and at each epoch's start that epoch's data order (a JAX permutation of
// the training set). Steps are sent ahead of the workers (steps_in_flight), so this costs
// a job only where it exceeds the steps in flight, as it may beside a fast GPU step.
#include <benchmark/benchmark.h>

#include <chrono>

#include "core/plan.h"

namespace lockstep {
namespace {

// range(0): training examples, range(1): the global batch. Per step, averaged over two
// epochs, with counters for the epochs' starts and the other steps apart.
void BM_PlanNext(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int b = static_cast<int>(state.range(1));
  double start_s = 0, other_s = 0;
  int64_t starts = 0, others = 0;
  for (auto _ : state) {
    TrainingPlan plan(0, 1, rng::Impl::kPartitionable, n, b, 1);
    const int64_t spe = plan.steps_per_epoch();
    for (int64_t s = 0; s < 2 * spe; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      StepPlan p = plan.Next();
      benchmark::DoNotOptimize(p.indices.data());
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      (s % spe == 0 ? start_s : other_s) += dt;
      ++(s % spe == 0 ? starts : others);
    }
  }
  state.counters["epoch_start_us"] = 1e6 * start_s / starts;
  state.counters["other_step_us"] = others > 0 ? 1e6 * other_s / others : 0;
  state.counters["per_step_us"] = 1e6 * (start_s + other_s) / (starts + others);
}
BENCHMARK(BM_PlanNext)
    ->ArgsProduct({{40000, 60000}, {128, 1024, 4096}})
    ->ArgNames({"examples", "batch"})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace lockstep

BENCHMARK_MAIN();
