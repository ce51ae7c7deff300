// The cluster's benchmark, in one run, printing one table (issue: cluster):
//  1. the control plane: a job whose compute is negligible (an MLP 784-8-10 at batch 1)
//     on one worker process, with one step command in flight (a gRPC round trip per step)
//     vs pipelined on the Steps stream (the coordinator's default);
//  2. the CNN at global batch 128 with 1 and 2 workers through the coordinator, each
//     step's time split into control plane (dispatch), compute, all-reduce and update;
//  3. the cluster's throughput against the same job loop in one process (`lockstep train`).
// Each cluster measurement twice: with TLS and tokens (the default) and in plaintext
// (--insecure), so that what security costs is in the same run.
// Usage: cluster_bench [--steps N] [--threads T]
#include <thread>

#include "absl/strings/str_format.h"
#include "bench/job_stats.h"
#include "core/spec/spec.h"
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
                                                                    int threads, bool insecure) {
  ClusterOptions options;
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

int Main(int argc, char** argv) {
  int steps = 80, threads = static_cast<int>(std::thread::hardware_concurrency());
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--steps") steps = std::stoi(argv[i + 1]);
    if (std::string(argv[i]) == "--threads") threads = std::stoi(argv[i + 1]);
  }
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
