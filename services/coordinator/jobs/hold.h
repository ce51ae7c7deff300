// Hold: where the step loop stops sending and drains its pipeline, and why. After the
// hold's step is answered the loop evaluates, snapshots, stops for a drain or a resize, as
// its reasons say, and then sends again (or ends the attempt).
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOBS_HOLD_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOBS_HOLD_H_

#include <cstdint>

namespace lockstep {

struct Hold {
  enum Reason : unsigned {
    kEval = 1,      // the spec's evaluation is due after the step
    kSnapshot = 2,  // a snapshot is due (the spec's cadence, an audit, a drain, a release)
    kChecksum = 4,  // the step is answered with the replicas' checksums
    kDrain = 8,     // the attempt ends Drained (or Suspended) after the snapshot
    kResize = 16,   // the attempt ends ResizeAt: workers join or leave
  };
  int64_t step = -1;  // -1: none
  unsigned reasons = 0;

  bool active() const { return step >= 0; }
  bool has(Reason r) const { return (reasons & r) != 0; }
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOBS_HOLD_H_
