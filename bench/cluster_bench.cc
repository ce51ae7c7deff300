// The cluster's benchmark, in one run, printing one table (issue: cluster):
//  1. the control plane alone: empty steps (no compute, no collective) to a real worker
//     process, one gRPC round trip per step vs. pipelined on the Steps stream;
//  2. the CNN at global batch 128 with 1 and 2 workers through the coordinator, each
//     step's time split into control plane (dispatch), compute, all-reduce and update;
//  3. the cluster's throughput against the single-process trainer on the same machine.
// Usage: cluster_bench [--steps N] [--threads T]
#include <grpcpp/grpcpp.h>

#include <thread>

#include "absl/strings/str_format.h"
#include "bench/job_stats.h"
#include "core/spec/spec.h"
#include "core/trainer.h"
#include "lockstep/v1/worker.grpc.pb.h"
#include "services/common/net.h"
#include "tests/cluster/local_cluster.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

struct ControlPlane {
  double round_trip_steps_per_sec = 0;
  double streamed_steps_per_sec = 0;
};

ControlPlane MeasureControlPlane(const std::string& worker_address) {
  auto stub = v1::Worker::NewStub(MakeChannel(worker_address));
  v1::StepRequest req;
  req.set_empty(true);
  ControlPlane out;
  const int unary = 2000, streamed = 50000;
  auto t0 = Clock::now();
  for (int i = 0; i < unary; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::StepResponse resp;
    req.set_step(i);
    if (!stub->Step(&ctx, req, &resp).ok()) return out;
  }
  out.round_trip_steps_per_sec = unary / Seconds(t0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto stream = stub->Steps(&ctx);
  t0 = Clock::now();
  std::thread writer([&] {
    for (int i = 0; i < streamed; ++i) {
      req.set_step(i);
      if (!stream->Write(req)) break;
    }
    stream->WritesDone();
  });
  v1::StepResponse resp;
  int got = 0;
  while (stream->Read(&resp)) ++got;
  writer.join();
  out.streamed_steps_per_sec = got / Seconds(t0);
  stream->Finish();
  return out;
}

v1::JobSpec CnnSpec(int workers, int steps) {
  v1::JobSpec spec;
  spec.mutable_model()->set_kind("cnn");
  spec.mutable_optimizer()->set_kind("sgd");
  spec.mutable_optimizer()->set_learning_rate(0.1);
  spec.mutable_optimizer()->set_momentum(0.9);
  spec.set_global_batch_size(128);
  spec.set_steps(steps);
  spec.set_workers(workers);
  return spec;
}

int Main(int argc, char** argv) {
  int steps = 80, threads = static_cast<int>(std::thread::hardware_concurrency());
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--steps") steps = std::stoi(argv[i + 1]);
    if (std::string(argv[i]) == "--threads") threads = std::stoi(argv[i + 1]);
  }
  const int warmup = 10;
  std::vector<JobStats> splits;
  ControlPlane cp;
  for (int workers : {1, 2}) {
    auto cluster = testing::LocalCluster::Start(workers, {}, std::max(1, threads / workers));
    if (!cluster.ok()) {
      absl::FPrintF(stderr, "%s\n", cluster.status().ToString());
      return 1;
    }
    if (workers == 1) {
      auto w = (*cluster)->Workers();
      cp = MeasureControlPlane(w->workers(0).address());
    }
    auto s = RunAndMeasure((*cluster)->jobs(), CnnSpec(workers, steps), warmup);
    if (!s.ok()) {
      absl::FPrintF(stderr, "%s\n%s\n", s.status().ToString(), (*cluster)->Logs());
      return 1;
    }
    splits.push_back(*s);
  }
  // The single-process trainer on the same spec and thread count.
  auto spec = Validate(CnnSpec(1, steps));
  SetCpuThreads(threads);
  auto backend = NewCpuBackend();
  auto single = Train(*spec, backend.get(), nullptr);
  if (!single.ok()) {
    absl::FPrintF(stderr, "%s\n", single.status().ToString());
    return 1;
  }

  absl::PrintF(
      "Lockstep cluster benchmark: CNN, global batch 128, %d steps (first %d skipped), "
      "%d CPU threads in all\n\n",
      steps, warmup, threads);
  absl::PrintF(
      "| workers | step wall ms | control plane ms (%% of step) | compute ms | "
      "all-reduce ms | update ms | samples/s | vs single process |\n");
  absl::PrintF("|---|---|---|---|---|---|---|---|\n");
  for (const auto& s : splits) {
    const double dispatch = std::max(0.0, s.wall - s.worker);
    absl::PrintF("| %d | %.2f | %.3f (%.2f%%) | %.2f | %.2f | %.2f | %.0f | %.2fx |\n", s.workers,
                 s.wall, dispatch, 100 * dispatch / s.wall, s.compute, s.allreduce, s.update,
                 s.samples_per_sec, s.samples_per_sec / single->samples_per_sec);
  }
  absl::PrintF("\nsingle-process trainer (lockstep train): %.0f samples/s\n",
               single->samples_per_sec);
  absl::PrintF("\n| control plane | empty steps/s |\n|---|---|\n");
  absl::PrintF("| one gRPC round trip per step (unary Step) | %.0f |\n",
               cp.round_trip_steps_per_sec);
  absl::PrintF("| pipelined on the Steps stream | %.0f (%.1fx) |\n", cp.streamed_steps_per_sec,
               cp.streamed_steps_per_sec / cp.round_trip_steps_per_sec);
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) { return lockstep::Main(argc, argv); }
