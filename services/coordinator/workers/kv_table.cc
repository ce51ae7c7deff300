// KvTable: the Rendezvous service's store. Contract: kv_table.h.
#include "services/coordinator/workers/kv_table.h"

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

void KvTable::Open(const std::string& job_id, const std::string& prefix,
                   std::set<std::string> members) {
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    CloseLocked(job_id, &ready);
    spaces_[job_id] = Namespace{prefix, std::move(members)};
  }
  Run(std::move(ready));
}

void KvTable::Close(const std::string& job_id) {
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    CloseLocked(job_id, &ready);
  }
  Run(std::move(ready));
}

void KvTable::CloseLocked(const std::string& job_id, Ready* ready) {
  auto space = spaces_.find(job_id);
  if (space == spaces_.end()) return;
  const std::string& prefix = space->second.prefix;
  for (auto it = values_.lower_bound(prefix);
       it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    it = values_.erase(it);
  }
  spaces_.erase(space);
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->second.job_id != job_id) {
      ++it;
      continue;
    }
    ready->emplace_back(std::move(it->second.done),
                        absl::AbortedError(absl::StrCat("rendezvous: job ", job_id,
                                                        "'s attempt ended; its keys are gone")));
    it = waiters_.erase(it);
  }
}

absl::StatusOr<std::string> KvTable::JobOfLocked(const std::string& key,
                                                 const std::string& caller) {
  const std::string* job = nullptr;
  size_t longest = 0;
  for (const auto& [id, space] : spaces_) {
    if (key.compare(0, space.prefix.size(), space.prefix) == 0 &&
        (job == nullptr || space.prefix.size() > longest)) {
      job = &id;
      longest = space.prefix.size();
    }
  }
  if (job == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("rendezvous: key ", key, " is in no running job's namespace"));
  }
  const Namespace& space = spaces_.at(*job);
  if (!space.members.empty() && !space.members.contains(caller)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "rendezvous: job ", *job, "'s keys are for its workers only, not for ", caller));
  }
  return *job;
}

absl::Status KvTable::Set(const std::string& key, const std::string& value,
                          const std::string& caller) {
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::string> job = JobOfLocked(key, caller);
    if (!job.ok()) return job.status();
    Namespace& space = spaces_.at(*job);
    auto it = values_.find(key);
    const size_t old = it == values_.end() ? 0 : key.size() + it->second.size();
    if (it == values_.end() && space.keys >= max_keys_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("rendezvous: job ", *job, " is over its budget of ", max_keys_, " keys"));
    }
    if (space.bytes - old + key.size() + value.size() > max_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("rendezvous: job ", *job, " is over its budget of ", max_bytes_, " bytes"));
    }
    space.bytes = space.bytes - old + key.size() + value.size();
    if (it == values_.end()) ++space.keys;
    values_[key] = value;
    CollectLocked(absl::Now(), &ready);
  }
  Run(std::move(ready));
  return absl::OkStatus();
}

absl::StatusOr<std::string> KvTable::Get(const std::string& key, const std::string& caller) {
  absl::MutexLock lock(&mu_);
  if (absl::StatusOr<std::string> job = JobOfLocked(key, caller); !job.ok()) return job.status();
  auto it = values_.find(key);
  if (it == values_.end()) return absl::NotFoundError(absl::StrCat("rendezvous: no key ", key));
  return it->second;
}

size_t KvTable::keys() {
  absl::MutexLock lock(&mu_);
  return values_.size();
}

int64_t KvTable::WaitAsync(std::vector<std::string> keys, absl::Time deadline, Done done,
                           const std::string& caller) {
  Ready ready;
  int64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = next_waiter_++;
    absl::StatusOr<std::string> job =
        keys.empty() ? absl::InvalidArgumentError("rendezvous: a wait needs keys")
                     : JobOfLocked(keys.front(), caller);
    for (size_t i = 1; job.ok() && i < keys.size(); ++i) {
      absl::StatusOr<std::string> other = JobOfLocked(keys[i], caller);
      if (!other.ok()) {
        job = other.status();
      } else if (*other != *job) {
        job = absl::InvalidArgumentError("rendezvous: a wait's keys are all one job's");
      }
    }
    if (stopping_) {
      ready.emplace_back(std::move(done), absl::UnavailableError("rendezvous: shutting down"));
    } else if (!job.ok()) {
      ready.emplace_back(std::move(done), job.status());
    } else {
      waiters_[id] = {std::move(keys), deadline, std::move(done), *job};
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
