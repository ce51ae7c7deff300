// RunLocalJob: a job trained in this process, for `lockstep train` and for comparisons in tests and
// benchmarks: the coordinator's job loop (JobRunner) over one in-process worker computing on the
// CPU. Contract: local_job.h.
#include "services/standalone/local_job.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "services/standalone/in_process_worker.h"
#include "workers/backend_factory.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {

absl::StatusOr<JobOutcome> RunLocalJob(const v1::JobSpec& spec, JobSink* sink) {
  if (spec.workers() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers: ", spec.workers(), "; a local job runs one worker"));
  }
  const int threads = spec.threads() > 0 ? static_cast<int>(spec.threads()) : DefaultCpuThreads();
  // device: cuda runs on this machine's first GPU, as a worker started with --device cuda:0.
  const std::string device = spec.device() == "cuda" ? "cuda:0" : "cpu";
  absl::StatusOr<std::unique_ptr<BackendSource>> backends = BackendSource::Create(device, threads);
  if (!backends.ok()) return backends.status();
  DatasetCache datasets(1);
  JobSlot slot(backends->get(), &datasets, /*collectives=*/nullptr);
  const std::string address = "in-process";
  InProcessWorkerFactory factory({{address, &slot}});
  PoolWorker worker;
  worker.id = "local";
  worker.address = address;
  worker.device = device;
  worker.threads = threads;
  CoordinatorOptions options;
  options.memory = {0, 0};                 // the user's own machine: no budgets
  options.adaptive_step_deadline = false;  // no peer to lose; a busy machine is slow, not dead
  JobRunner runner(kLocalJobId, spec, {worker}, &factory, options, sink);
  JobOutcome outcome;
  absl::Status st = runner.Run(&outcome);
  if (!st.ok()) return st;
  if (outcome.pending != nullptr) {
    // No coordinator stays to write it later: one more try, else the disk's error.
    if (absl::Status written = outcome.pending->Write(); !written.ok()) return written;
    outcome.checkpoint_path = std::filesystem::absolute(outcome.pending->path()).string();
    outcome.checkpoint_pending.clear();
  }
  return outcome;
}

}  // namespace lockstep
