// SimJob: one job as the fake workers (fake_workers.h) hold it: the replicated state's
// checksum (and rank 0's copy of it, for FetchState), the step streams of its ranks, and
// the clock that answers every rank's step s at
//   T(s) = max(T(s-1), the time the last rank received command s) + compute.
// StepsStream is the Worker.Steps reactor that feeds it.
//
// Thread safety: SimJob is thread-safe. Its lock is taken before a stream's, never after.
#ifndef LOCKSTEP_BENCH_SCALE_SIM_JOB_H_
#define LOCKSTEP_BENCH_SCALE_SIM_JOB_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bench/scale/fake_workers.h"
#include "core/train_state.h"
#include "lockstep/v1/worker.grpc.pb.h"

namespace lockstep {

class StepsStream;

class SimJob {
 public:
  SimJob(int world_size, absl::Duration compute);
  ~SimJob();  // stops the clock

  // Rank `rank`'s Prepare ran from `begin` to `end` and loaded params with `checksum`;
  // rank 0 also hands over the state (header and bytes) for FetchState.
  void Prepared(int rank, uint64_t checksum, absl::Time begin, absl::Time end,
                const StateHeader& header, std::string bytes);
  // The state as FetchState serves it: rank 0's, at the steps answered so far.
  StateHeader State(std::string* bytes);

  void Attach(StepsStream* stream);
  void Detach(StepsStream* stream);  // after it, the stream is never called again
  // A rank received the command for `step`.
  void Arrive(int64_t step);

  JobTiming Timing();

 private:
  struct Arrivals {
    int count = 0;
    absl::Time last;
  };
  void Clock();
  v1::StepResponse Answer(int64_t step, absl::Duration took) const;

  const int world_size_;
  const absl::Duration compute_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t checksum_ ABSL_GUARDED_BY(mu_) = 0;
  StateHeader header_ ABSL_GUARDED_BY(mu_);
  std::string bytes_ ABSL_GUARDED_BY(mu_);
  std::set<StepsStream*> streams_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Arrivals> arrivals_ ABSL_GUARDED_BY(mu_);  // by step, not yet answered
  int64_t next_ ABSL_GUARDED_BY(mu_) = 0;                      // the step to answer next
  absl::Time last_end_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  JobTiming timing_ ABSL_GUARDED_BY(mu_);
  std::thread clock_;
};

// Looks a job up by id (the fake workers' table of jobs).
class SimJobs {
 public:
  virtual ~SimJobs() = default;
  virtual std::shared_ptr<SimJob> Find(const std::string& job_id) = 0;
};

// One Worker.Steps stream: each command read is reported to its job, and the job's
// answers are written in order, one write in flight at a time.
class StepsStream final : public grpc::ServerBidiReactor<v1::StepRequest, v1::StepResponse> {
 public:
  explicit StepsStream(SimJobs* jobs);
  // Queues the answer to the oldest unanswered command. Called by the job's clock.
  void Answer(const v1::StepResponse& response);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // Starts the next write, or finishes once every command is answered and the reads are
  // done (or at once on an error).
  void Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SimJobs* const jobs_;
  std::shared_ptr<SimJob> job_;  // set by the first read; used on the reading thread and OnDone
  v1::StepRequest request_;      // the read in flight
  absl::Mutex mu_;
  v1::StepResponse message_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::StepResponse> outbox_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;  // commands read, not answered
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_BENCH_SCALE_SIM_JOB_H_
