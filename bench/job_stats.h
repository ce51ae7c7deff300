// Runs a job on a coordinator and measures it from its step events after a warm-up:
// the per-step time split that StepEvent carries, averaged. Shared by the benchmarks.
#ifndef LOCKSTEP_BENCH_JOB_STATS_H_
#define LOCKSTEP_BENCH_JOB_STATS_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lockstep/v1/job.grpc.pb.h"

namespace lockstep {

struct JobStats {
  int workers = 0;
  int64_t steps = 0;  // measured (after the warm-up)
  // Milliseconds per step.
  double wall = 0, worker = 0, compute = 0, allreduce = 0, update = 0;
  double samples_per_sec = 0;
  v1::Job job;  // the finished job
};

// The Flax MNIST CNN at global batch 128, SGD with momentum 0.9 (the benchmarks' job).
v1::JobSpec CnnSpec(int workers, int steps);

// Submits `spec`, watches it to the end and averages the step events after `warmup`.
// Errors: the submission's; INTERNAL naming the job's state and failure reason when it
// does not succeed; DEADLINE_EXCEEDED when it has not ended within `timeout`, after
// cancelling it (so that it does not hold its workers from the next job).
absl::StatusOr<JobStats> RunAndMeasure(v1::JobService::Stub& jobs, const v1::JobSpec& spec,
                                       int warmup,
                                       absl::Duration timeout = absl::InfiniteDuration());

}  // namespace lockstep

#endif  // LOCKSTEP_BENCH_JOB_STATS_H_
