// Bootstrap tokens, with which new workers enroll (services/coordinator/api/enrollment.h): a
// file of one token a line, at least 16 characters, optionally expiring:
//
//   TOKEN [expires=2027-01-31T00:00:00Z]   # "#" starts a comment
//
// Rotating one means writing a new line first (workers send the first token), and the old
// line's `expires=` or its removal; the coordinator reads the file again when it changes.
#ifndef LOCKSTEP_SERVICES_COMMON_SECURITY_BOOTSTRAP_TOKENS_H_
#define LOCKSTEP_SERVICES_COMMON_SECURITY_BOOTSTRAP_TOKENS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace lockstep {

struct BootstrapToken {
  std::string token;
  std::optional<absl::Time> expires;  // none: it does not expire
};

// The tokens of `text`, in order. INVALID_ARGUMENT naming `source` and the line for a short
// token, a field other than expires=TIME or a time that is not RFC 3339; and when there is
// none.
absl::StatusOr<std::vector<BootstrapToken>> ParseBootstrapTokens(absl::string_view text,
                                                                 const std::string& source);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_SECURITY_BOOTSTRAP_TOKENS_H_
