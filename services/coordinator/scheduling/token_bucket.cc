// TokenBucket: a rate limit of N events a minute that allows a burst of up to N (one minute's
// worth), refilled continuously. Contract: token_bucket.h.
#include "services/coordinator/scheduling/token_bucket.h"

#include <algorithm>
#include <cmath>

namespace lockstep {

TokenBucket::TokenBucket(int per_minute, absl::Time now)
    : capacity_(std::max(1, per_minute)),
      per_second_(capacity_ / 60.0),
      tokens_(capacity_),
      last_(now) {}

void TokenBucket::Refill(absl::Time now) {
  if (now <= last_) return;
  tokens_ = std::min(capacity_, tokens_ + absl::ToDoubleSeconds(now - last_) * per_second_);
  last_ = now;
}

bool TokenBucket::TryTake(absl::Time now, absl::Duration* wait) {
  Refill(now);
  if (tokens_ >= 1.0) {
    tokens_ -= 1.0;
    return true;
  }
  if (wait != nullptr)
    *wait = absl::Seconds(std::ceil((1.0 - tokens_) / per_second_ * 1000) / 1000);
  return false;
}

}  // namespace lockstep
