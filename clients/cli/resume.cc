// Resuming a job's event stream after it broke: where to resume, and which events of the new stream
// were seen already. Contract: resume.h.
#include "clients/cli/resume.h"

namespace lockstep::cli {

bool EventResume::First(const v1::JobEvent& event) {
  if (event.has_step() && event.step().replay()) {
    // A step run again after a recovery: shown once (a resumed stream may bring it again).
    return replays_.insert(event.SerializeAsString()).second;
  }
  if (event.has_step()) {
    if (event.step().step() <= last_step_) return false;
    last_step_ = event.step().step();
    return true;
  }
  if (event.has_eval()) {
    if (event.eval().step() <= last_eval_step_) return false;
    last_eval_step_ = event.eval().step();
    return true;
  }
  return states_.insert(event.SerializeAsString()).second;
}

}  // namespace lockstep::cli
