// RunLocalJob: a job trained in this process, for `lockstep train` and for comparisons in
// tests and benchmarks: the coordinator's job loop (JobRunner) over one in-process worker
// computing on the CPU, or on this machine's first GPU for `device: cuda` (FAILED_PRECONDITION
// where the build has no CUDA or there is no GPU). Same plan, same step, same checkpoint as
// on a cluster.
#ifndef LOCKSTEP_SERVICES_STANDALONE_LOCAL_JOB_H_
#define LOCKSTEP_SERVICES_STANDALONE_LOCAL_JOB_H_

#include "absl/status/statusor.h"
#include "lockstep/v1/spec.pb.h"
#include "services/coordinator/jobs/job_runner.h"

namespace lockstep {

// The job's id in its events and checkpoint.
inline constexpr char kLocalJobId[] = "local";

// Runs `spec` (validated, workers: 1) with `threads` CPU threads (0: its `threads`, else
// all cores), reporting to `sink`. Writes spec.checkpoint_path when set (relative to the
// working directory). The job's error, or what the run did.
absl::StatusOr<JobOutcome> RunLocalJob(const v1::JobSpec& spec, JobSink* sink);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_STANDALONE_LOCAL_JOB_H_
