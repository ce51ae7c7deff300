// StepFanout: the coordinator's end of one job's step streams, one per worker. Step
// commands go out on every stream at once; the answers are queued as the streams hand
// them over (on gRPC's callback threads; a stream that cannot gets a reader thread of its
// own), and Take hands back every worker's answer to the next step, or the first error,
// or DEADLINE_EXCEEDED naming the late. Errors name the worker through `blame`. The job's
// cancel token breaks every stream. Per step it costs O(N) in all, none of it a thread
// per worker: a thousand workers are a thousand queued writes and answers.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOBS_STEP_FANOUT_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOBS_STEP_FANOUT_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/coordinator/workers/worker_client.h"

namespace lockstep {

class StepFanout {
 public:
  // Wraps a worker's error with the worker's name: blame(rank, status).
  using Blame = std::function<absl::Status(int, const absl::Status&)>;

  // Opens a step stream for `job_id` to every client (rank r = clients[r]), each living
  // `lifetime` and cancelled with `cancel` (which must outlive the fanout).
  static absl::StatusOr<std::unique_ptr<StepFanout>> Open(
      const std::vector<std::unique_ptr<WorkerClient>>& clients, const std::string& job_id,
      const CancelToken& cancel, absl::Duration lifetime, Blame blame);
  ~StepFanout();  // cancels what is still open, joins the readers, closes the streams

  int size() const { return static_cast<int>(streams_.size()); }

  // Queues commands[r] on worker r's stream. A broken stream reports through Take.
  void Send(const std::vector<StepCommand>& commands);

  // Every worker's next answer, which must be for `step`; waits at most `timeout`.
  absl::StatusOr<std::vector<StepResult>> Take(int64_t step, absl::Duration timeout);
  // After Take failed: every worker's answer to `step` if each has one queued already
  // (the step completed everywhere before the failure), without waiting; NOT_FOUND
  // otherwise. An elastic resize continues after such a step (jobs/attempt_kept.cc).
  absl::StatusOr<std::vector<StepResult>> TakeAnswered(int64_t step);

  // No more commands: waits until every worker has ended its stream, at most `timeout`
  // (then breaks the streams); DEADLINE_EXCEEDED naming a worker that did not.
  absl::Status Close(absl::Duration timeout);

  // Breaks every stream; a waiting Take returns promptly. Thread-safe.
  void Cancel();

  // The error that ended each rank's stream so far (OK: none, or a clean end).
  std::vector<absl::Status> Errors();

 private:
  StepFanout(std::vector<std::unique_ptr<StepStream>> streams, absl::Duration lifetime,
             Blame blame);
  bool AllEnded() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Whether rank's next answer, or its end, is here.
  bool Settled(int rank) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Queues rank's answer, or records the status that ended its stream.
  void Hand(int rank, absl::StatusOr<StepResult> answer);
  // A reader thread's loop, for a stream that does not hand its answers over by itself.
  void Read(int rank);
  // Joins the readers (their Receive ends on Cancel) and waits until every stream has
  // ended, at most kJoinTimeout (call Cancel or Close first).
  void Join();

  // Destroyed explicitly first (~StepFanout): a stream delivers nothing once destroyed.
  std::vector<std::unique_ptr<StepStream>> streams_;
  const absl::Duration lifetime_;  // a reader's wait for one answer
  const Blame blame_;
  std::vector<std::thread> readers_;

  absl::Mutex mu_;
  std::vector<std::deque<StepResult>> answers_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> ended_ ABSL_GUARDED_BY(mu_);  // OUT_OF_RANGE: a clean end
  int first_error_ ABSL_GUARDED_BY(mu_) = -1;
  int settled_ ABSL_GUARDED_BY(mu_) = 0;      // ranks for which Settled holds
  int ended_early_ ABSL_GUARDED_BY(mu_) = 0;  // ranks ended with no answer left
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOBS_STEP_FANOUT_H_
