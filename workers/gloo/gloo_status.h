// Where Gloo's exceptions become absl::Status. Gloo throws (gloo::IoException for socket
// errors and timeouts, gloo::EnforceNotMet for broken invariants, ...); every call into
// Gloo goes through CallGloo, which maps what it throws:
//   a timeout (Gloo's messages say "timeout" or "timed out")  -> DEADLINE_EXCEEDED
//   any other gloo::IoException (lost peer, socket error)     -> UNAVAILABLE
//   a StoreError (the rendezvous store failed)                 -> the store's own code
//   anything else                                              -> INTERNAL
// The message names the operation and the rank, then gives Gloo's own message.
#ifndef LOCKSTEP_WORKERS_GLOO_GLOO_STATUS_H_
#define LOCKSTEP_WORKERS_GLOO_GLOO_STATUS_H_

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace lockstep::gloo_internal {

// Carries a lockstep::Store error through Gloo's rendezvous code, which only knows
// exceptions, back to CallGloo.
class StoreError : public std::runtime_error {
 public:
  explicit StoreError(absl::Status status)
      : std::runtime_error(std::string(status.message())), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// The status for the exception being handled; call only from inside a catch block.
// `what` names the operation and the rank ("gloo rank 1 of 4: all-reduce of 10 floats").
absl::Status StatusFromCurrentException(absl::string_view what);

// Runs `fn`, which calls into Gloo, and returns the mapped status of what it throws.
template <typename Fn>
absl::Status CallGloo(absl::string_view what, Fn&& fn) {
  try {
    std::forward<Fn>(fn)();
    return absl::OkStatus();
  } catch (...) {
    return StatusFromCurrentException(what);
  }
}

}  // namespace lockstep::gloo_internal

#endif  // LOCKSTEP_WORKERS_GLOO_GLOO_STATUS_H_
