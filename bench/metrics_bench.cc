// What the metrics add to a step, measured alone (google-benchmark): the coordinator's
// JobSeries::OnStep (4 gauges, 4 counters, 4 histogram observations), the worker's
// WorkerMetrics::OnStep and one metered all-reduce's bookkeeping, and, for contrast, a
// scrape (MetricsServer::Page) of a coordinator with 20 jobs' series.
#include <benchmark/benchmark.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "services/common/observability/metrics.h"
#include "services/coordinator/observability/coordinator_metrics.h"
#include "services/worker/worker_metrics.h"

namespace lockstep {
namespace {

void BM_CoordinatorOnStep(benchmark::State& state) {
  CoordinatorMetrics metrics(std::make_shared<prometheus::Registry>());
  JobSeries* series = metrics.JobStarted("job-000001-aaaaaaaa", /*samples_per_step=*/64);
  v1::StepEvent e;
  e.set_loss(0.5);
  e.set_wall_ms(40);
  e.set_compute_ms(30);
  e.set_allreduce_ms(8);
  e.set_update_ms(1);
  int64_t step = 0;
  for (auto _ : state) {
    e.set_step(++step);
    series->OnStep(e);
  }
}
BENCHMARK(BM_CoordinatorOnStep);

void BM_WorkerOnStepAndAllReduce(benchmark::State& state) {
  WorkerMetrics metrics(std::make_shared<prometheus::Registry>());
  StepResult r;
  r.compute_ms = 30;
  r.allreduce_ms = 8;
  r.update_ms = 1;
  for (auto _ : state) {
    metrics.OnAllReduce(4 * 1000000, 0.008);
    metrics.OnStep(r);
  }
}
BENCHMARK(BM_WorkerOnStepAndAllReduce);

void BM_ScrapeACoordinator(benchmark::State& state) {
  CoordinatorMetrics metrics(std::make_shared<prometheus::Registry>());
  for (int j = 0; j < CoordinatorMetrics::kEndedJobsKept; ++j) {
    metrics.JobStarted(absl::StrCat("job-", j), 64)->OnStep(v1::StepEvent());
  }
  auto server = MetricsServer::Start("127.0.0.1:0", metrics.collectables(), "");
  if (!server.ok()) {
    state.SkipWithError(std::string(server.status().message()).c_str());
    return;
  }
  size_t bytes = 0;
  for (auto _ : state) bytes = (*server)->Page().size();
  state.counters["page_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_ScrapeACoordinator);

}  // namespace
}  // namespace lockstep

BENCHMARK_MAIN();
