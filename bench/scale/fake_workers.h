// FakeWorkers: many simulated workers in one process, for the coordinator's scale
// benchmark (bench/coordinator_scale.cc). Each speaks the real protocol: it registers with
// the coordinator's WorkerRegistry over a connection of its own and heartbeats at the
// interval the coordinator asks for, and it serves the Worker API on a port of its own
// (all ports on one gRPC server and its callback threads): Prepare takes the replicated
// state and answers its real checksum, Steps answers each step command, Evaluate and
// FetchState answer as a replica whose params never change.
//
// A step is simulated, not computed: the workers of a job answer step s together at
//   T(s) = max(T(s-1), the time the last of them received command s) + compute,
// which is what an all-reduce makes of a real step (every replica waits for the slowest).
// Any wait for a command beyond T(s-1) is the coordinator's dispatch showing through; it
// is summed in JobTiming::late.
//
// Thread safety: every method may be called from any thread.
#ifndef LOCKSTEP_BENCH_SCALE_FAKE_WORKERS_H_
#define LOCKSTEP_BENCH_SCALE_FAKE_WORKERS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep {

struct FakeWorkerOptions {
  int workers = 1;
  absl::Duration compute = absl::Milliseconds(100);  // each simulated step
  int64_t train_examples = 1'281'167;                // what Prepare reports (ImageNet-1k's size)
  int64_t test_examples = 50'000;
};

// What the workers saw of one job.
struct JobTiming {
  absl::Time prepare_begin, prepare_end;  // the first Prepare's start, the last one's end
  int64_t steps = 0;                      // answered
  absl::Duration late;                    // total wait for commands beyond T(s-1)
  int64_t late_steps = 0;                 // steps that waited so
  absl::Time first_answer, last_answer;   // when the answers to the first and last step went
};

class FakeWorkers {
 public:
  // Starts the server, registers every worker with the coordinator at `coordinator`
  // (plaintext) and starts their heartbeats. UNAVAILABLE when a registration fails.
  static absl::StatusOr<std::unique_ptr<FakeWorkers>> Start(const std::string& coordinator,
                                                            const FakeWorkerOptions& options);
  virtual ~FakeWorkers() = default;  // stops heartbeats, then the server

  virtual JobTiming Timing(const std::string& job_id) = 0;
  // Heartbeats answered OK and not, so far.
  virtual int64_t heartbeats_ok() = 0;
  virtual int64_t heartbeats_failed() = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_BENCH_SCALE_FAKE_WORKERS_H_
