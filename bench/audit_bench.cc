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
// With --replay 1, the replay audit's cost instead (docs/audit.md, "The replay audit"): a
// one-worker job (one CPU thread, a snapshot every --snapshot_every steps) with no free
// worker, its replays skipped (the coordinator's replica off) against replayed by the
// coordinator's own replica (one thread, niced by kLocalReplicaNice), and by a free
// in-process worker (not niced), all in this process: on this machine's cores.
//
//   audit_bench [--steps S] [--rounds R] [--hidden H] [--batch B] [--bn 0|1] [--replay 0|1]
//               [--snapshot_every N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/data/data_roots.h"
#include "core/spec/spec.h"
#include "services/coordinator/jobs/job_runner.h"
#include "services/standalone/coordinator_replica.h"
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
  // The replay audit's checker: the spare while it is not lent.
  std::optional<PoolWorker> LendWorker(const std::string&, uint32_t,
                                       const std::vector<std::string>&) override {
    if (!spare.has_value() || lent) return std::nullopt;
    lent = true;
    return spare;
  }
  void ReturnWorker(const PoolWorker&) override { lent = false; }
  LocalReplica* local_replica() override { return local; }
  JobRunner* runner = nullptr;
  std::optional<PoolWorker> spare;  // a free worker, for the replay audit
  bool lent = false;
  LocalReplica* local = nullptr;  // the coordinator's replica, for the replay audit
};

// Counts the replays that passed.
class ReplaySink final : public JobSink {
 public:
  void OnRunning(int64_t) override {}
  void OnStep(const v1::StepEvent&) override {}
  void OnEval(const v1::EvalResult&) override {}
  void OnNote(const std::string& why) override { passed += absl::StrContains(why, ": passed:"); }
  int passed = 0;
};

// With `spare`, one more in-process worker is free for the replay audit.
absl::StatusOr<double> SamplesPerSec(const v1::JobSpec& spec, LocalReplica* local = nullptr,
                                     bool spare = false, int* replays = nullptr) {
  testing::InProcessWorkers workers(static_cast<int>(spec.workers()) + (spare ? 1 : 0));
  std::vector<PoolWorker> ranks = workers.pool_workers();
  ReplaySink sink;
  NoSupply supply;
  supply.local = local;
  if (spare) {
    supply.spare = ranks.back();
    ranks.pop_back();
  }
  CoordinatorOptions options;  // no folders: snapshots are held in memory
  JobRunner runner("bench", spec, ranks, workers.factory(), options, &sink, &supply);
  supply.runner = &runner;
  JobOutcome out;
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status st = runner.Run(&out);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!st.ok()) return st;
  if (replays != nullptr) *replays = sink.passed;
  return spec.steps() * spec.global_batch_size() / s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// --replay 1: a one-worker job, its replays skipped (off), run on the coordinator's replica
// (replica), or on a free worker (worker: the peer, an in-process worker not niced).
int ReplayMain(const v1::JobSpec& base, int rounds, int snapshot_every) {
  v1::JobSpec spec = base;
  spec.set_workers(1);
  spec.mutable_recovery()->set_snapshot_every_steps(snapshot_every);
  absl::StatusOr<v1::JobSpec> valid = Validate(spec);
  if (!valid.ok()) {
    absl::FPrintF(stderr, "%s\n", valid.status().ToString());
    return 1;
  }
  CoordinatorReplica replica(*DataRoots::Parse(kDefaultDataRoots), "", 1, uint64_t{512} << 20);
  std::map<std::string, std::vector<double>> got;
  for (int round = 0; round < rounds; ++round) {
    for (const std::string mode : {"off", "replica", "worker"}) {
      int replays = 0;
      absl::StatusOr<double> sps =
          SamplesPerSec(*valid, mode == "replica" ? &replica : nullptr, mode == "worker", &replays);
      if (!sps.ok()) {
        absl::FPrintF(stderr, "replay %s: %s\n", mode, sps.status().ToString());
        return 1;
      }
      got[mode].push_back(*sps);
      absl::PrintF("round %d replay %-8s %8.0f samples/s  %d replays passed\n", round, mode, *sps,
                   replays);
    }
  }
  const double off = Median(got["off"]);
  for (const char* mode : {"off", "replica", "worker"}) {
    const double m = Median(got[mode]);
    absl::PrintF("replay %-8s median %8.0f samples/s  ratio to off %.3f\n", mode, m, m / off);
  }
  return 0;
}

int Main(int argc, char** argv) {
  std::map<std::string, int> f = {{"steps", 400},         {"rounds", 5}, {"hidden", 512},
                                  {"batch", 128},         {"bn", 0},     {"replay", 0},
                                  {"snapshot_every", 100}};
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
  if (f["replay"] != 0) return ReplayMain(base, f["rounds"], f["snapshot_every"]);
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
  const double off = Median(got["off"]);
  absl::PrintF("the default: every %d steps\n", default_every);
  for (std::optional<int> every : modes) {
    const double m = Median(got[label(every)]);
    absl::PrintF("audit %-8s median %8.0f samples/s  ratio to off %.3f\n", label(every), m,
                 m / off);
  }
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) { return lockstep::Main(argc, argv); }
