#include "services/coordinator/kv_table.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {

KvTable::KvTable(size_t max_keys, size_t max_bytes)
    : max_keys_(max_keys), max_bytes_(max_bytes), timer_([this] { TimerLoop(); }) {}

KvTable::~KvTable() {
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [id, w] : waiters_) {
      ready.emplace_back(std::move(w.done), absl::UnavailableError("rendezvous: shutting down"));
    }
    waiters_.clear();
  }
  timer_.join();
  Run(std::move(ready));
}

absl::Status KvTable::Set(const std::string& key, const std::string& value) {
  Ready ready;
  {
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
    CollectLocked(absl::Now(), &ready);
  }
  Run(std::move(ready));
  return absl::OkStatus();
}

absl::StatusOr<std::string> KvTable::Get(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return absl::NotFoundError(absl::StrCat("rendezvous: no key ", key));
  return it->second;
}

void KvTable::ErasePrefix(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  for (auto it = values_.lower_bound(prefix);
       it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    bytes_ -= it->first.size() + it->second.size();
    it = values_.erase(it);
  }
}

int64_t KvTable::WaitAsync(std::vector<std::string> keys, absl::Time deadline, Done done) {
  Ready ready;
  int64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = next_waiter_++;
    if (stopping_) {
      ready.emplace_back(std::move(done), absl::UnavailableError("rendezvous: shutting down"));
    } else {
      waiters_[id] = {std::move(keys), deadline, std::move(done)};
      CollectLocked(absl::Now(), &ready);
    }
  }
  Run(std::move(ready));
  return id;
}

void KvTable::CancelWait(int64_t id, absl::Status why) {
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    ready.emplace_back(std::move(it->second.done), std::move(why));
    waiters_.erase(it);
  }
  Run(std::move(ready));
}

size_t KvTable::waiters() {
  absl::MutexLock lock(&mu_);
  return waiters_.size();
}

void KvTable::CollectLocked(absl::Time now, Ready* ready) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    Waiter& w = it->second;
    std::vector<std::string> values, missing;
    for (const std::string& k : w.keys) {
      auto v = values_.find(k);
      if (v == values_.end()) {
        missing.push_back(k);
      } else {
        values.push_back(v->second);
      }
    }
    if (missing.empty()) {
      ready->emplace_back(std::move(w.done), std::move(values));
    } else if (now >= w.deadline) {
      ready->emplace_back(std::move(w.done),
                          absl::DeadlineExceededError(absl::StrCat(
                              "rendezvous: keys not set in time: ", absl::StrJoin(missing, ", "))));
    } else {
      ++it;
      continue;
    }
    it = waiters_.erase(it);
  }
}

void KvTable::Run(Ready ready) {
  for (auto& [done, result] : ready) done(std::move(result));
}

void KvTable::TimerLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    absl::Time next = absl::InfiniteFuture();
    for (const auto& [id, w] : waiters_) next = std::min(next, w.deadline);
    // Woken early by a new waiter (whose deadline may be sooner) or by stopping.
    const int64_t seen = next_waiter_;
    auto changed = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stopping_ || next_waiter_ != seen;
    };
    mu_.AwaitWithDeadline(absl::Condition(&changed), next);
    Ready ready;
    CollectLocked(absl::Now(), &ready);
    if (ready.empty()) continue;
    mu_.Unlock();
    Run(std::move(ready));
    mu_.Lock();
  }
}

}  // namespace lockstep
