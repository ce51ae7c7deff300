// The audit tests' harness: audit_testing.h.
#include "services/standalone/audit_testing.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/spec/testing.h"
#include "core/status_macros.h"
#include "core/testing.h"

namespace lockstep::testing {

v1::JobSpec Spec(int workers, int steps, std::optional<uint64_t> audit_every, int replicas) {
  v1::JobSpec spec = SmallMlpSpec(1, steps);
  spec.set_workers(workers);
  spec.set_replicas(replicas);
  spec.set_global_batch_size(48);
  spec.mutable_model()->set_dropout_rate(0.2);
  if (audit_every.has_value()) spec.mutable_audit()->set_every_steps(*audit_every);
  absl::StatusOr<v1::JobSpec> valid = Validate(spec);
  EXPECT_OK(valid.status());
  return valid.value_or(spec);
}

absl::Status Double(Backend& backend, float* grads, size_t count) {
  return backend.Divide(count, 0.5f, grads);
}

absl::StatusOr<JobOutcome> RunOn(InProcessWorkers& workers, const v1::JobSpec& spec,
                                 const std::string& id, Recorder* sink, SpareSupply* supply) {
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir(id);
  std::vector<PoolWorker> ranks = workers.pool_workers();
  ranks.resize(spec.workers());
  JobRunner runner(id, spec, ranks, workers.factory(), options, sink, supply);
  if (supply != nullptr) supply->runner = &runner;
  JobOutcome out;
  absl::Status st = runner.Run(&out);
  std::filesystem::remove_all(options.checkpoint_dir);
  RETURN_IF_ERROR(st);
  return out;
}

SparedRun RunWithSpares(InProcessWorkers& workers, const v1::JobSpec& spec, const std::string& id,
                        LocalReplica* local, bool lend) {
  SpareSupply supply(workers.pool_workers(), static_cast<int>(spec.workers()));
  supply.local = local;
  supply.lend = lend;
  Recorder sink;
  SparedRun run;
  run.out = RunOn(workers, spec, id, &sink, &supply);
  run.reasons = supply.reasons;
  run.quarantined = supply.quarantined;
  run.notes = sink.notes;
  run.steps = sink.steps;
  return run;
}

SparedRun RunWithLiar(int total, int liar, const v1::JobSpec& spec, const std::string& id) {
  InProcessWorkers workers(total);
  workers.slot(liar).SetGradientFaultForTesting(Double);
  return RunWithSpares(workers, spec, id);
}

absl::StatusOr<JobOutcome> Undisturbed(v1::JobSpec spec, Recorder* sink) {
  spec.mutable_audit()->set_every_steps(0);
  InProcessWorkers honest(static_cast<int>(spec.workers()));
  Recorder own;
  return RunOn(honest, spec, "clean", sink != nullptr ? sink : &own);
}

v1::JobSpec OneWorker(int steps) {
  v1::JobSpec spec = Spec(1, steps, std::nullopt);
  spec.mutable_recovery()->set_snapshot_every_steps(5);
  return spec;
}

v1::JobSpec BatchNormOnReplicas(int steps, int workers) {
  v1::JobSpec spec = ValidSpec(absl::StrCat(R"(
model:
  layers: [{flatten: {}}, {dense: {features: 16}}, {batch_norm: {}}, {relu: {}},
           {dense: {features: 10}}]
optimizer: {kind: adam, learning_rate: 0.001}
global_batch_size: 48
replicas: 4
recovery: {snapshot_every_steps: 5}
workers: )",
                                            workers, "\nsteps: ", steps, "\n"));
  EXPECT_EQ(spec.audit().every_steps(), 100u);
  return spec;
}

}  // namespace lockstep::testing
