#include "services/coordinator/kv_table.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {

absl::Status KvTable::Set(const std::string& key, const std::string& value) {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(key);
  const size_t old = it == values_.end() ? 0 : key.size() + it->second.size();
  if (it == values_.end() && values_.size() >= max_keys_) {
    return absl::ResourceExhaustedError(absl::StrCat("rendezvous: over ", max_keys_, " keys"));
  }
  if (bytes_ - old + key.size() + value.size() > max_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("rendezvous: over ", max_bytes_, " bytes"));
  }
  bytes_ = bytes_ - old + key.size() + value.size();
  values_[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::string> KvTable::Get(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return absl::NotFoundError(absl::StrCat("rendezvous: no key ", key));
  return it->second;
}

absl::StatusOr<std::vector<std::string>> KvTable::Wait(const std::vector<std::string>& keys,
                                                       absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto all_set = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    for (const auto& k : keys) {
      if (!values_.count(k)) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all_set), timeout)) {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!values_.count(k)) missing.push_back(k);
    }
    return absl::DeadlineExceededError(absl::StrCat("rendezvous: keys not set within ",
                                                    absl::FormatDuration(timeout), ": ",
                                                    absl::StrJoin(missing, ", ")));
  }
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(values_[k]);
  return out;
}

void KvTable::ErasePrefix(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  for (auto it = values_.lower_bound(prefix);
       it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    bytes_ -= it->first.size() + it->second.size();
    it = values_.erase(it);
  }
}

}  // namespace lockstep
