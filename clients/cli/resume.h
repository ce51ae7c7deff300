// Resuming a job's event stream after it broke: where to resume, and which events of the
// new stream were seen already. WatchJob replays the job's state events in full and its
// step and evaluation events from `from_step` on; a job that recovered from a snapshot
// runs (and reports) some steps again.
#ifndef LOCKSTEP_CLIENTS_CLI_RESUME_H_
#define LOCKSTEP_CLIENTS_CLI_RESUME_H_

#include <cstdint>
#include <set>
#include <string>

#include "lockstep/v1/job.pb.h"

namespace lockstep::cli {

// Not thread-safe: one per watch.
class EventResume {
 public:
  // Whether `event` is new, i.e. after every step and evaluation seen so far, or a state
  // event or a replayed step (StepEvent.replay) not seen before; records it if so.
  bool First(const v1::JobEvent& event);
  // Only steps and evaluations after `step` are new (a watch from a running job's current
  // step, not its history).
  void StartAt(int64_t step) {
    last_step_ = step;
    last_eval_step_ = step;
  }
  // The from_step of the next WatchJob: the last step seen (its evaluation, if any, may
  // not have arrived yet; First drops the step event itself).
  int64_t from_step() const { return last_step_; }

 private:
  int64_t last_step_ = 0;
  int64_t last_eval_step_ = -1;
  std::set<std::string> states_;   // the state events seen, serialized
  std::set<std::string> replays_;  // the replayed steps' events seen, serialized
};

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_RESUME_H_
