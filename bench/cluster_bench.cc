// The cluster's benchmark, in one run, printing one table (issue: cluster):
//  1. the control plane: a job whose compute is negligible (an MLP 784-8-10 at batch 1)
//     on one worker process, with one step command in flight (a gRPC round trip per step)
//     vs pipelined on the Steps stream (the coordinator's default);
//  2. the CNN at global batch 128 with 1 and 2 workers through the coordinator, each
//     step's time split into control plane (dispatch), compute, all-reduce and update;
//  3. the cluster's throughput against the same job loop in one process (`lockstep train`).
// Each cluster measurement twice: with TLS and tokens (the default) and in plaintext
// (--insecure), so that what security costs is in the same run.
// With --compare_metrics R it measures instead what Prometheus metrics cost: R rounds,
// each with every server's metrics off, then on (--metrics_listen, the RPC interceptor,
// and a scrape of every server each second), of the CNN's control-plane share (1 worker)
// and samples/s (1 and 2 workers), and of the tiny job's pipelined steps/s.
// Usage: cluster_bench [--steps N] [--threads T] [--compare_metrics R]
#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include "absl/strings/str_format.h"
#include "bench/job_stats.h"
#include "core/spec/spec.h"
#include "services/common/observability/http_testing.h"
#include "services/standalone/local_job.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep {
namespace {

v1::JobSpec TinySpec(int steps) {
  v1::JobSpec spec;
  spec.mutable_model()->set_kind("mlp");
  spec.mutable_model()->add_hidden(8);
  spec.mutable_optimizer()->set_kind("sgd");
  spec.mutable_optimizer()->set_learning_rate(0.01);
  spec.set_global_batch_size(1);
  spec.set_steps(steps);
  return spec;
}

absl::StatusOr<std::unique_ptr<testing::LocalCluster>> StartCluster(int workers,
                                                                    std::vector<std::string> flags,
                                                                    int threads, bool insecure,
                                                                    bool metrics = false) {
  ClusterOptions options;
  options.metrics = metrics;
  options.workers = workers;
  options.coordinator_flags = std::move(flags);
  options.threads_per_worker = threads;
  options.insecure = insecure;
  return testing::LocalCluster::Start(std::move(options));
}

const char* TransportName(bool insecure) { return insecure ? "plaintext" : "TLS"; }

// Steps per second of the tiny job on a fresh 1-worker cluster with `in_flight` step
// commands in flight.
absl::StatusOr<double> ControlPlaneRate(int in_flight, int steps, bool insecure) {
  auto cluster = StartCluster(1, {absl::StrCat("--steps_in_flight=", in_flight)}, 1, insecure);
  if (!cluster.ok()) return cluster.status();
  auto s = RunAndMeasure((*cluster)->jobs(), TinySpec(steps), steps / 10);
  if (!s.ok()) return s.status();
  return 1000.0 / s->wall;
}

// GETs every server's /metrics each second while it lives, as Prometheus would.
class Scraper {
 public:
  explicit Scraper(std::vector<std::string> addresses) : addresses_(std::move(addresses)) {
    thread_ = std::thread([this] {
      while (!stop_) {
        for (const std::string& a : addresses_) {
          if (a.empty()) continue;
          if (testing::HttpGet(std::stoi(a.substr(a.rfind(':') + 1)), "/metrics").ok()) {
            ++scrapes_;
          }
        }
        for (int i = 0; i < 10 && !stop_; ++i) absl::SleepFor(absl::Milliseconds(100));
      }
    });
  }
  ~Scraper() {
    stop_ = true;
    thread_.join();
  }
  int scrapes() const { return scrapes_; }

 private:
  const std::vector<std::string> addresses_;
  std::atomic<bool> stop_{false};
  std::atomic<int> scrapes_{0};
  std::thread thread_;
};

// One measurement with metrics off or on: the CNN on `workers` workers (TLS), or the tiny
// job (workers 0) pipelined.
absl::StatusOr<JobStats> MeasureWithMetrics(int workers, int steps, int threads, bool metrics,
                                            int* scrapes) {
  auto cluster = StartCluster(std::max(1, workers), {}, std::max(1, threads / std::max(1, workers)),
                              /*insecure=*/false, metrics);
  if (!cluster.ok()) return cluster.status();
  std::optional<Scraper> scraper;
  if (metrics) scraper.emplace((*cluster)->processes().MetricsAddresses());
  auto s = workers == 0 ? RunAndMeasure((*cluster)->jobs(), TinySpec(steps), steps / 10)
                        : RunAndMeasure((*cluster)->jobs(), CnnSpec(workers, steps), 10);
  if (scraper) *scrapes += scraper->scrapes();
  return s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty()      ? 0
         : v.size() % 2 ? v[v.size() / 2]
                        : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int CompareMetrics(int rounds, int steps, int threads) {
  // [metrics off, on]: per round.
  std::vector<double> share[2], one_sps[2], two_sps[2], tiny[2];
  int scrapes = 0;
  for (int r = 0; r < rounds; ++r) {
    for (bool metrics : {false, true}) {
      // --steps 0: the tiny job alone.
      auto one = steps > 0 ? MeasureWithMetrics(1, steps, threads, metrics, &scrapes)
                           : absl::StatusOr<JobStats>(JobStats());
      auto two = steps > 0 ? MeasureWithMetrics(2, steps, threads, metrics, &scrapes)
                           : absl::StatusOr<JobStats>(JobStats());
      auto empty = MeasureWithMetrics(0, 3000, threads, metrics, &scrapes);
      for (const auto* st : {&one, &two, &empty}) {
        if (!st->ok()) {
          absl::FPrintF(stderr, "%s\n", st->status().ToString());
          return 1;
        }
      }
      share[metrics].push_back(
          one->wall > 0 ? 100 * std::max(0.0, one->wall - one->worker) / one->wall : 0);
      one_sps[metrics].push_back(one->samples_per_sec);
      two_sps[metrics].push_back(two->samples_per_sec);
      tiny[metrics].push_back(1000.0 / empty->wall);
      absl::PrintF(
          "round %d, metrics %s: control plane %.2f%% of a step, %.0f samples/s (1 worker), "
          "%.0f samples/s (2 workers), %.0f tiny steps/s\n",
          r + 1, metrics ? "on " : "off", share[metrics].back(), one_sps[metrics].back(),
          two_sps[metrics].back(), tiny[metrics].back());
      std::fflush(stdout);
    }
  }
  absl::PrintF(
      "\nPrometheus metrics off vs on (TLS; medians of %d rounds, interleaved; CNN at global "
      "batch 128, %d steps, %d CPU threads in all; %d scrapes of /metrics while on)\n\n",
      rounds, steps, threads, scrapes);
  absl::PrintF("| measure | metrics off | metrics on | on / off |\n|---|---|---|---|\n");
  auto row = [](const char* name, const std::vector<double>* v, const char* fmt) {
    const double off = Median(v[0]), on = Median(v[1]);
    absl::PrintF("| %s | %s | %s | %.3f |\n", name, absl::StrFormat(fmt, off),
                 absl::StrFormat(fmt, on), off > 0 ? on / off : 0);
  };
  row("control plane, % of a step (1 worker)", share, "%.2f%%");
  row("samples/s, 1 worker", one_sps, "%.0f");
  row("samples/s, 2 workers", two_sps, "%.0f");
  row("tiny job, pipelined steps/s (control plane alone)", tiny, "%.0f");
  return 0;
}

int Main(int argc, char** argv) {
  int steps = 80, threads = static_cast<int>(std::thread::hardware_concurrency());
  int compare_metrics = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--steps") steps = std::stoi(argv[i + 1]);
    if (std::string(argv[i]) == "--threads") threads = std::stoi(argv[i + 1]);
    if (std::string(argv[i]) == "--compare_metrics") compare_metrics = std::stoi(argv[i + 1]);
  }
  if (compare_metrics > 0) return CompareMetrics(compare_metrics, steps, threads);
  const int warmup = 10;
  std::vector<std::pair<bool, JobStats>> splits;  // (insecure, stats)
  for (bool insecure : {false, true}) {
    for (int workers : {1, 2}) {
      auto cluster = StartCluster(workers, {}, std::max(1, threads / workers), insecure);
      if (!cluster.ok()) {
        absl::FPrintF(stderr, "%s\n", cluster.status().ToString());
        return 1;
      }
      auto s = RunAndMeasure((*cluster)->jobs(), CnnSpec(workers, steps), warmup);
      if (!s.ok()) {
        absl::FPrintF(stderr, "%s\n%s\n", s.status().ToString(), (*cluster)->Logs());
        return 1;
      }
      splits.push_back({insecure, *s});
    }
  }
  const int tiny_steps = 3000;
  absl::StatusOr<double> round_trip[2], streamed[2];  // [insecure]
  for (bool insecure : {false, true}) {
    round_trip[insecure] = ControlPlaneRate(1, tiny_steps, insecure);
    streamed[insecure] =
        ControlPlaneRate(CoordinatorOptions().steps_in_flight, tiny_steps, insecure);
  }
  // The same job loop in one process, on the same spec and thread count.
  v1::JobSpec spec = CnnSpec(1, steps);
  spec.set_threads(threads);
  NullJobSink sink;
  auto single = RunLocalJob(*Validate(spec), &sink);
  for (const absl::Status& st : {round_trip[0].status(), round_trip[1].status(),
                                 streamed[0].status(), streamed[1].status(), single.status()}) {
    if (!st.ok()) {
      absl::FPrintF(stderr, "%s\n", st.ToString());
      return 1;
    }
  }

  absl::PrintF(
      "Lockstep cluster benchmark: CNN, global batch 128, %d steps (first %d skipped), "
      "%d CPU threads in all\n\n",
      steps, warmup, threads);
  absl::PrintF(
      "| transport | workers | step wall ms | control plane ms (%% of step) | compute ms | "
      "all-reduce ms | update ms | samples/s | vs single process |\n");
  absl::PrintF("|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& [insecure, s] : splits) {
    const double dispatch = std::max(0.0, s.wall - s.worker);
    absl::PrintF("| %s | %d | %.2f | %.3f (%.2f%%) | %.2f | %.2f | %.2f | %.0f | %.2fx |\n",
                 TransportName(insecure), s.workers, s.wall, dispatch, 100 * dispatch / s.wall,
                 s.compute, s.allreduce, s.update, s.samples_per_sec,
                 s.samples_per_sec / single->samples_per_sec);
  }
  absl::PrintF("\nsingle process (lockstep train): %.0f samples/s\n", single->samples_per_sec);
  absl::PrintF(
      "\n| control plane: MLP 784-8-10 at batch 1, 1 worker | TLS steps/s | plaintext steps/s "
      "|\n|---|---|---|\n");
  absl::PrintF("| one step command in flight (a round trip per step) | %.0f | %.0f |\n",
               *round_trip[0], *round_trip[1]);
  absl::PrintF("| pipelined on the Steps stream (%d in flight) | %.0f (%.1fx) | %.0f (%.1fx) |\n",
               CoordinatorOptions().steps_in_flight, *streamed[0], *streamed[0] / *round_trip[0],
               *streamed[1], *streamed[1] / *round_trip[1]);
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) { return lockstep::Main(argc, argv); }
