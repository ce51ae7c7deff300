// What the job's audit costs (JobSpec.audit, docs/audit.md): one 2-worker job (the
// coordinator's job loop over two in-process workers, one CPU thread each, Gloo on
// loopback) trained with the audit off, every 100 and every 10 steps, in interleaved
// rounds so that every mode sees the same machine load. Per mode it prints samples/s over
// the whole run (the audits' recomputations, pipeline drains and snapshots included; the
// final evaluation and checkpoint excluded: none is asked for) for each round, the median,
// and its ratio to the audit off.
//
//   audit_bench [--steps S] [--rounds R] [--hidden H] [--batch B]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/spec/spec.h"
#include "services/coordinator/jobs/job_runner.h"
#include "services/standalone/testing.h"

namespace lockstep {
namespace {

// Never called by an honest run; its presence makes the audits snapshot, as on a cluster.
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
  std::map<std::string, int> f = {{"steps", 400}, {"rounds", 5}, {"hidden", 512}, {"batch", 128}};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = std::string(argv[i]).substr(2);
    if (!f.contains(name)) {
      absl::FPrintF(stderr, "audit_bench: unknown flag %s\n", argv[i]);
      return 2;
    }
    f[name] = std::stoi(argv[i + 1]);
  }
  v1::JobSpec base;
  base.mutable_model()->set_kind("mlp");
  base.mutable_model()->add_hidden(f["hidden"]);
  base.mutable_model()->add_hidden(f["hidden"]);
  base.mutable_model()->set_dropout_rate(0.1);
  base.mutable_optimizer()->set_kind("adam");
  base.mutable_optimizer()->set_learning_rate(1e-3);
  base.set_global_batch_size(f["batch"]);
  base.set_steps(f["steps"]);
  base.set_workers(2);
  base.set_threads(1);
  const std::vector<int> modes = {0, 100, 10};
  std::map<int, std::vector<double>> got;
  for (int round = 0; round < f["rounds"]; ++round) {
    for (int every : modes) {
      v1::JobSpec spec = base;
      spec.mutable_audit()->set_every_steps(every);
      absl::StatusOr<v1::JobSpec> valid = Validate(spec);
      if (!valid.ok()) {
        absl::FPrintF(stderr, "%s\n", valid.status().ToString());
        return 1;
      }
      absl::StatusOr<double> sps = SamplesPerSec(*valid);
      if (!sps.ok()) {
        absl::FPrintF(stderr, "audit %d: %s\n", every, sps.status().ToString());
        return 1;
      }
      got[every].push_back(*sps);
      absl::PrintF("round %d audit %-4s %8.0f samples/s\n", round,
                   every == 0 ? "off" : absl::StrCat(every), *sps);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double off = median(got[0]);
  for (int every : modes) {
    absl::PrintF("audit %-4s median %8.0f samples/s  ratio to off %.3f\n",
                 every == 0 ? "off" : absl::StrCat("/", every), median(got[every]),
                 median(got[every]) / off);
  }
  return 0;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) { return lockstep::Main(argc, argv); }
