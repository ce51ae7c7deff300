// Store: the small key-value rendezvous that bootstraps a collective (Gloo's addresses, NCCL's
// unique id). Contract: store.h.
#include "core/store.h"

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::Status MemoryStore::Set(const std::string& key, const std::string& value) {
  absl::MutexLock lock(&mu_);
  values_[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::string> MemoryStore::Get(const std::string& key, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto has_key = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return values_.count(key) > 0; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&has_key), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("rendezvous key ", key, " not set within ", absl::FormatDuration(timeout)));
  }
  return values_[key];
}

}  // namespace lockstep
