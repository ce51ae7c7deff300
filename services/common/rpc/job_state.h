// Job states and ids as the JobService defines them.
#ifndef LOCKSTEP_SERVICES_COMMON_RPC_JOB_STATE_H_
#define LOCKSTEP_SERVICES_COMMON_RPC_JOB_STATE_H_

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "lockstep/v1/job.pb.h"

namespace lockstep {

// SUCCEEDED, FAILED or CANCELLED: the job will not change again.
inline bool IsTerminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

// A coordinator's job id: "job-NNNNNN-xxxxxxxx", a number (the order of submission) and
// 8 random hex digits (so that other callers cannot guess it); "job-NNNNNN" from before.
inline bool IsJobId(absl::string_view id) {
  if (!absl::ConsumePrefix(&id, "job-")) return false;
  const size_t dash = id.find('-');
  const absl::string_view number = id.substr(0, dash);
  const absl::string_view tag = dash == id.npos ? "" : id.substr(dash + 1);
  auto digits = [](absl::string_view s, bool hex) {
    return std::all_of(s.begin(), s.end(), [hex](char c) {
      return hex ? absl::ascii_isxdigit(c) : absl::ascii_isdigit(c);
    });
  };
  return !number.empty() && digits(number, false) &&
         (dash == id.npos || (tag.size() == 8 && digits(tag, true)));
}

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_RPC_JOB_STATE_H_
