// What the job's audit costs (JobSpec.audit, docs/audit.md): one 2-worker job (the
// coordinator's job loop over two in-process workers, one CPU thread each, Gloo on
// loopback) trained with the audit off, at its default (the spec's `audit` unset) and
// every 10 steps, in interleaved rounds so that every mode sees the same machine load. Per
// mode it prints samples/s over the whole run (the audits' recomputations included, and
// the snapshots the recovery's cadence takes, each of them audited; the final evaluation
// and checkpoint excluded: none is asked for) for each round, the median, and its ratio
// to the audit off.
//
// With --bn 1 the job is a BatchNorm convnet on 4 logical replicas (2 per worker): its
// shard audit computes the audited replica beside the checker's own two (the ride-along,
// core/step.h).
//
//   audit_bench [--steps S] [--rounds R] [--hidden H] [--batch B] [--bn 0|1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/spec/spec.h"
#include "services/coordinator/jobs/job_runner.h"
#include "services/standalone/testing.h"

namespace lockstep {
namespace {

// Never called by an honest run; its presence makes the job recover, and so snapshot, as
// on a cluster.
class NoSupply final : public WorkerSupply {
 public:
  void Recovering(const std::vector<std::string>&, const absl::Status& reason,
                  absl::Duration) override {
    runner->NoWorkers(reason);
  }
  JobRunner* runner = nullptr;
};

absl::StatusOr<double> SamplesPerSec(const v1::JobSpec& spec) {
  testing::InProcessWorkers workers(2);
  NullJobSink sink;
  NoSupply supply;
  CoordinatorOptions options;  // no folders: snapshots are held in memory
  JobRunner runner("bench", spec, workers.pool_workers(), workers.factory(), options, &sink,
                   &supply);
  supply.runner = &runner;
  JobOutcome out;
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status st = runner.Run(&out);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!st.ok()) return st;
  return spec.steps() * spec.global_batch_size() / s;
}

int Main(int argc, char** argv) {
  std::map<std::string, int> f = {
      {"steps", 400}, {"rounds", 5}, {"hidden", 512}, {"batch", 128}, {"bn", 0}};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = std::string(argv[i]).substr(2);
    if (!f.contains(name)) {
      absl::FPrintF(stderr, "audit_bench: unknown flag %s\n", argv[i]);
      return 2;
    }
    f[name] = std::stoi(argv[i + 1]);
  }
  v1::JobSpec base;
  if (f["bn"] != 0) {
    // examples/bn-convnet.yaml's layers at half the width, with dropout.
    absl::StatusOr<v1::JobSpec> bn = ParseSpec(R"(
model:
  input_shape: [28, 28, 1]
  layers:
    - conv: {features: 16, kernel_size: [3, 3]}
    - batch_norm: {momentum: 0.9}
    - relu
    - max_pool: {window_shape: [2, 2], strides: [2, 2]}
    - conv: {features: 32, kernel_size: [3, 3]}
    - batch_norm: {momentum: 0.9}
    - relu
    - max_pool: {window_shape: [2, 2], strides: [2, 2]}
    - flatten
    - dense: {features: 64}
    - batch_norm: {momentum: 0.9}
    - relu
    - dropout: {rate: 0.3}
    - dense: {features: 10}
replicas: 4
)",
                                               "audit_bench");
    if (!bn.ok()) {
      absl::FPrintF(stderr, "%s\n", bn.status().ToString());
      return 1;
    }
    base = *bn;
  } else {
    base.mutable_model()->set_kind("mlp");
    base.mutable_model()->add_hidden(f["hidden"]);
    base.mutable_model()->add_hidden(f["hidden"]);
    base.mutable_model()->set_dropout_rate(0.1);
  }
  base.mutable_optimizer()->set_kind("adam");
  base.mutable_optimizer()->set_learning_rate(1e-3);
  base.set_global_batch_size(f["batch"]);
  base.set_steps(f["steps"]);
  base.set_workers(2);
  base.set_threads(1);
  // The audit's every_steps: 0 (off), unset (the default), 10.
  const std::vector<std::optional<int>> modes = {0, std::nullopt, 10};
  auto label = [](std::optional<int> every) -> std::string {
    return !every.has_value() ? "default" : *every == 0 ? "off" : absl::StrCat("/", *every);
  };
  std::map<std::string, std::vector<double>> got;
  uint64_t default_every = 0;
  for (int round = 0; round < f["rounds"]; ++round) {
    for (std::optional<int> every : modes) {
      v1::JobSpec spec = base;
      if (every.has_value()) spec.mutable_audit()->set_every_steps(*every);
      absl::StatusOr<v1::JobSpec> valid = Validate(spec);
      if (!valid.ok()) {
        absl::FPrintF(stderr, "%s\n", valid.status().ToString());
        return 1;
      }
      if (!every.has_value()) default_every = valid->audit().every_steps();
      absl::StatusOr<double> sps = SamplesPerSec(*valid);
      if (!sps.ok()) {
        absl::FPrintF(stderr, "audit %s: %s\n", label(every), sps.status().ToString());
        return 1;
      }
      got[label(every)].push_back(*sps);
      absl::PrintF("round %d audit %-8s %8.0f samples/s\n", round, label(every), *sps);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double off = median(got["off"]);
  absl::PrintF("the default: every %d steps\n", default_every);
  for (std::optional<int> every : modes) {
    const double m = median(got[label(every)]);
    absl::PrintF("audit %-8s median %8.0f samples/s  ratio to off %.3f\n", label(every), m,
                 m / off);
  }
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) { return lockstep::Main(argc, argv); }
