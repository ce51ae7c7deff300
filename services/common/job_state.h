// Job states as the JobService defines them.
#ifndef LOCKSTEP_SERVICES_COMMON_JOB_STATE_H_
#define LOCKSTEP_SERVICES_COMMON_JOB_STATE_H_

#include "lockstep/v1/job.pb.h"

namespace lockstep {

// SUCCEEDED, FAILED or CANCELLED: the job will not change again.
inline bool IsTerminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_JOB_STATE_H_
