// How long a step's answers may take (JobRunner's step loop).
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOBS_STEP_DEADLINE_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOBS_STEP_DEADLINE_H_

#include <algorithm>
#include <deque>

#include "absl/time/time.h"

namespace lockstep {

// The configured step timeout until a few steps have been seen (the first include
// warm-ups), then, when adaptive, ten times the slowest of the last 20 steps, at least 3 s:
// a stalled worker is found in seconds, not at the step timeout. Not adaptive where no
// peer can be lost (one process): there a busy machine's slow step is only slow.
class StepDeadline {
 public:
  StepDeadline(absl::Duration limit, bool adaptive) : limit_(limit), adaptive_(adaptive) {}

  // One step's wall time, answer to answer.
  void Add(absl::Duration wall) {
    recent_.push_back(wall);
    if (recent_.size() > 20) recent_.pop_front();
  }
  absl::Duration Next() const {
    if (!adaptive_ || recent_.size() < 5) return limit_;
    const absl::Duration slowest = *std::max_element(recent_.begin(), recent_.end());
    return std::min(limit_, std::max(absl::Seconds(3), 10 * slowest));
  }

 private:
  const absl::Duration limit_;
  const bool adaptive_;
  std::deque<absl::Duration> recent_;  // the last 20 steps' wall times
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOBS_STEP_DEADLINE_H_
