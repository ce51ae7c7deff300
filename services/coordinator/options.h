// The coordinator's settings (flags and environment variables in main.cc).
#ifndef LOCKSTEP_SERVICES_COORDINATOR_OPTIONS_H_
#define LOCKSTEP_SERVICES_COORDINATOR_OPTIONS_H_

#include <string>

#include "absl/time/time.h"
#include "core/clock.h"
#include "core/spec/memory.h"
#include "core/spec/spec.h"
#include "services/coordinator/scheduling/user_limits.h"

namespace lockstep {

struct CoordinatorOptions {
  SpecLimits limits;
  MemoryBudget memory;  // jobs estimated to need more are refused at submit
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  absl::Duration prepare_timeout = absl::Seconds(180);  // dataset load + collective bootstrap
  absl::Duration step_timeout = absl::Seconds(60);      // one step's answer
  // Whether a step's answers are also due within 10x the slowest recent step (at least
  // 3 s), so that a stalled worker is found in seconds. Off in one process (lockstep
  // train): there is no peer to lose, and a busy machine's slow step must not end the job.
  bool adaptive_step_deadline = true;
  absl::Duration rpc_timeout = absl::Seconds(30);     // evaluate, fetch
  absl::Duration release_timeout = absl::Seconds(1);  // a job's cleanup, also after a cancel
  absl::Duration collective_timeout = absl::Seconds(30);
  int steps_in_flight = 4;          // step commands sent ahead of the slowest answer
  size_t history_bytes = 4 << 20;   // a running job's event log (about 40,000 step events)
  int64_t history_steps = 2000;     // the steps a job keeps after it ends (StepHistory's budget)
  size_t log_bytes = 256 << 10;     // a job's log lines for WatchLogs (the newest kept)
  int max_watchers_per_job = 1024;  // WatchJob streams pin no thread: a few KiB each
  int max_watchers = 4096;
  int max_queued_jobs = 1000;   // in all: the safety net below user_limits
  int max_jobs_kept = 10000;    // job records in all (AdmitLocked: never another owner's)
  std::string checkpoint_dir;   // where relative checkpoint_path values land
  std::string records_dir;      // job records (JobRecords); empty: kept in memory only
  std::string snapshot_dir;     // jobs' snapshots (SnapshotStore); empty: held in memory
  std::string tensorboard_dir;  // jobs' TensorBoard event files (DIR/JOB); empty: none

  // Per owner: queued and running jobs, submits a minute, retention (user_limits.h).
  UserLimitsTable user_limits;
  const Clock* clock = Clock::Real();  // the submit rate's time
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_OPTIONS_H_
