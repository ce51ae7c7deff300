// WorkerPool: the registered workers, their identities (the worker name in each one's certificate,
// auth.h), their liveness (heartbeats) and which job holds each. Contract: worker_pool.h.
#include "services/coordinator/workers/worker_pool.h"

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/common/security/auth.h"

namespace lockstep {

std::string WorkerPool::NewInstanceTag() {
  return absl::StrFormat("%08x", absl::Uniform<uint32_t>(absl::BitGen()));
}

WorkerPool::WorkerPool(absl::Duration heartbeat_timeout, std::string instance, Clock* clock)
    : timeout_(heartbeat_timeout), instance_(std::move(instance)), clock_(clock) {}

absl::Status WorkerPool::UseRevocationFile(const std::string& path) {
  absl::StatusOr<RevokedWorkers> revoked = RevokedWorkers::Load(path);
  if (!revoked.ok()) return revoked.status();
  absl::MutexLock lock(&mu_);
  revoked_ = *std::move(revoked);
  return absl::OkStatus();
}

absl::StatusOr<std::string> WorkerPool::RegisterAs(const std::string& identity,
                                                   const std::string& address,
                                                   const std::string& device,
                                                   const std::string& name, uint32_t threads) {
  absl::MutexLock lock(&mu_);
  if (!identity.empty() && revoked_.Contains(identity)) {
    return absl::PermissionDeniedError(absl::StrCat("worker identity ", identity, " is revoked"));
  }
  for (const auto& [id, w] : workers_) {
    if (w.address == address && !w.identity.empty() && w.identity != identity) {
      return absl::PermissionDeniedError(
          absl::StrCat("address ", address, " is held by worker ", id, " of another identity"));
    }
  }
  for (auto it = workers_.begin(); it != workers_.end();) {
    const PoolWorker& w = it->second;
    if (w.address == address || (!identity.empty() && w.identity == identity)) {
      lost_.push_back({w, absl::StrCat("worker ", it->first, " at ", w.address,
                                       " restarted and registered again")});
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  // Zero-padded so that map order is registration order; the suffix is this pool's, so that
  // ids are not reused across coordinator lifetimes (a live worker from before a restart
  // gets NOT_FOUND for its old id and registers again).
  std::string id = absl::StrFormat("w%04d", next_id_++);
  if (!instance_.empty()) absl::StrAppend(&id, "-", instance_);
  workers_[id] = PoolWorker{id, address, device, name, identity, threads, "", clock_->Now()};
  return id;
}

std::string WorkerPool::Register(const std::string& address, const std::string& device,
                                 const std::string& name, uint32_t threads) {
  return *RegisterAs("", address, device, name, threads);  // without identity: never refused
}

absl::StatusOr<PoolWorker*> WorkerPool::OwnedLocked(const std::string& id,
                                                    const std::string& identity) {
  auto it = workers_.find(id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", id, " is not registered"));
  }
  if (it->second.identity != identity) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker ", id, " was registered by another identity"));
  }
  return &it->second;
}

absl::Status WorkerPool::CheckIdentity(const std::string& id, const std::string& identity) {
  absl::MutexLock lock(&mu_);
  return OwnedLocked(id, identity).status();
}

absl::Status WorkerPool::Heartbeat(const std::string& id, const std::string& identity) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<PoolWorker*> w = OwnedLocked(id, identity);
  if (!w.ok()) return w.status();
  (*w)->last_seen = clock_->Now();
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> WorkerPool::MarkLeaving(const std::string& id,
                                                                   const std::string& identity) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<PoolWorker*> w = OwnedLocked(id, identity);
  if (!w.ok()) return w.status();
  if ((*w)->leaving) return std::optional<std::string>();
  (*w)->leaving = true;
  return std::optional<std::string>((*w)->job_id);
}

absl::StatusOr<std::string> WorkerPool::Revoke(const std::string& id_or_identity) {
  absl::MutexLock lock(&mu_);
  std::string identity = id_or_identity;
  if (auto it = workers_.find(id_or_identity); it != workers_.end()) {
    identity = it->second.identity;
    if (identity.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", id_or_identity, " has no certificate identity (a plaintext cluster)"));
    }
  } else if (!ValidWorkerName(id_or_identity)) {
    return absl::NotFoundError(
        absl::StrCat("no worker ", id_or_identity, " is registered, nor is it an identity"));
  }
  if (absl::Status st = revoked_.Add(identity); !st.ok()) return st;
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (it->second.identity == identity) {
      lost_.push_back({it->second, absl::StrCat("worker ", it->first, " (identity ", identity,
                                                ") was revoked by an admin")});
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  return identity;
}

bool WorkerPool::IsRevoked(const std::string& identity) {
  absl::MutexLock lock(&mu_);
  return !identity.empty() && revoked_.Contains(identity);
}

namespace {
std::string QuarantineKey(const PoolWorker& w) {
  return w.identity.empty() ? "address " + w.address : "identity " + w.identity;
}
}  // namespace

void WorkerPool::Quarantine(const std::string& id, const std::string& why) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it != workers_.end()) quarantined_[QuarantineKey(it->second)] = why;
}

const std::string* WorkerPool::QuarantinedLocked(const PoolWorker& w) const {
  auto it = quarantined_.find(QuarantineKey(w));
  return it == quarantined_.end() ? nullptr : &it->second;
}

std::vector<WorkerView> WorkerPool::Views() {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerView> out;
  for (const auto& [id, w] : workers_) {
    if (QuarantinedLocked(w) == nullptr && !w.leaving) {
      out.push_back({id, w.device, w.threads, w.job_id.empty()});
    }
  }
  return out;
}

absl::StatusOr<std::vector<PoolWorker>> WorkerPool::Assign(const std::string& job_id,
                                                           const std::vector<std::string>& ids) {
  absl::MutexLock lock(&mu_);
  for (const std::string& id : ids) {
    auto it = workers_.find(id);
    if (it == workers_.end() || !it->second.job_id.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("worker ", id, " is no longer free"));
    }
    if (QuarantinedLocked(it->second) != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("worker ", id, " is quarantined"));
    }
    if (it->second.leaving) {
      return absl::FailedPreconditionError(absl::StrCat("worker ", id, " is leaving"));
    }
  }
  std::vector<PoolWorker> out;
  for (const std::string& id : ids) {
    workers_[id].job_id = job_id;
    out.push_back(workers_[id]);
  }
  return out;
}

void WorkerPool::Release(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  for (auto& [id, w] : workers_) {
    if (w.job_id == job_id) w.job_id.clear();
  }
}

void WorkerPool::Free(const std::vector<std::string>& ids) {
  absl::MutexLock lock(&mu_);
  for (const std::string& id : ids) {
    if (auto it = workers_.find(id); it != workers_.end()) it->second.job_id.clear();
  }
}

void WorkerPool::Drop(const std::string& id) {
  absl::MutexLock lock(&mu_);
  workers_.erase(id);
}

std::vector<LostWorker> WorkerPool::TakeLost(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (now - it->second.last_seen > timeout_ && it->second.leaving && it->second.job_id.empty()) {
      it = workers_.erase(it);  // it left, as it said it would
    } else if (now - it->second.last_seen > timeout_) {
      lost_.push_back({it->second, absl::StrCat("worker ", it->first, " at ", it->second.address,
                                                " missed its heartbeats for ",
                                                absl::FormatDuration(now - it->second.last_seen))});
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<LostWorker> out;
  out.swap(lost_);
  return out;
}

std::vector<v1::WorkerInfo> WorkerPool::List() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::WorkerInfo> out;
  for (const auto& [id, w] : workers_) {
    v1::WorkerInfo info;
    info.set_id(id);
    info.set_address(w.address);
    info.set_device(w.device);
    info.set_name(w.name);
    info.set_threads(w.threads);
    info.set_job_id(w.job_id);
    info.set_last_heartbeat_unix_ms(absl::ToUnixMillis(w.last_seen));
    if (const std::string* why = QuarantinedLocked(w)) info.set_quarantined(*why);
    info.set_leaving(w.leaving);
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace lockstep
