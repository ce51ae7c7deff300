// GlooStore: Gloo's rendezvous::Store interface over a lockstep::Store, so that Gloo's
// connectFullMesh can rendezvous through the coordinator (or a MemoryStore in tests). Contract:
// gloo_store.h.
#include "workers/gloo/gloo_store.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "workers/gloo/gloo_status.h"

namespace lockstep::gloo_internal {

GlooStore::GlooStore(lockstep::Store* store, absl::Time deadline)
    : store_(store), deadline_(deadline) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status = store_->Set(key, std::string(data.begin(), data.end()));
  if (!status.ok()) throw StoreError(std::move(status));
}

std::vector<char> GlooStore::get(const std::string& key) {
  const std::string value = Fetch(key);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) Fetch(key);
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& /*timeout*/) {
  wait(keys);
}

std::string GlooStore::Fetch(const std::string& key) {
  {
    absl::MutexLock lock(&mu_);
    auto it = fetched_.find(key);
    if (it != fetched_.end()) return it->second;
  }
  const absl::Duration left = std::max(absl::ZeroDuration(), deadline_ - absl::Now());
  absl::StatusOr<std::string> value = store_->Get(key, left);
  if (!value.ok()) throw StoreError(std::move(value).status());
  absl::MutexLock lock(&mu_);
  return fetched_.emplace(key, *std::move(value)).first->second;
}

}  // namespace lockstep::gloo_internal
