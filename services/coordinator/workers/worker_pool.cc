// WorkerPool: the registered workers, their identities (the worker name in each one's certificate,
// auth.h), their liveness (heartbeats) and which job holds each. Contract: worker_pool.h.
#include "services/coordinator/workers/worker_pool.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
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

absl::Status WorkerPool::UseEnrollmentFile(const std::string& path, const ApprovalPolicy& policy) {
  absl::StatusOr<EnrolledWorkers> enrolled = EnrolledWorkers::Load(path);
  if (!enrolled.ok()) return enrolled.status();
  absl::MutexLock lock(&mu_);
  enrolled_ = *std::move(enrolled);
  approval_ = policy;
  return absl::OkStatus();
}

absl::StatusOr<EnrolledWorkers::Entry> WorkerPool::RecordEnrolled(const std::string& identity,
                                                                  const std::string& name) {
  absl::MutexLock lock(&mu_);
  return enrolled_.Add(identity, name, approval_);
}

absl::StatusOr<std::string> WorkerPool::Approve(const std::string& id_or_identity) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id_or_identity);
  const std::string identity = it != workers_.end() ? it->second.identity : id_or_identity;
  if (absl::Status st = enrolled_.Approve(identity); !st.ok()) return st;
  return identity;
}

std::vector<std::string> WorkerPool::PendingApproval() {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const EnrolledWorkers::Entry& e : enrolled_.entries()) {
    if (e.status == EnrolledWorkers::Status::kPending) out.push_back(e.identity);
  }
  return out;
}

absl::StatusOr<std::string> WorkerPool::RegisterAs(const std::string& identity,
                                                   const std::string& address,
                                                   const std::string& device,
                                                   const std::string& name, uint32_t threads,
                                                   const std::string& fingerprint) {
  absl::MutexLock lock(&mu_);
  if (revoked_.Contains(identity)) {
    return absl::PermissionDeniedError(absl::StrCat("worker identity ", identity, " is revoked"));
  }
  if (revoked_.Contains(fingerprint)) {
    return absl::PermissionDeniedError(
        absl::StrCat("the certificate ", fingerprint, " (identity ", identity, ") is revoked"));
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
  workers_[id] =
      PoolWorker{id, address, device, name, identity, fingerprint, threads, "", clock_->Now()};
  if (!identity.empty()) seen_.insert(identity);
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

namespace {

// w0003 or w0003-1a2b3c4d: the ids this pool gives (RegisterAs).
bool LooksLikeWorkerId(absl::string_view s) {
  const size_t dash = s.find('-');
  const absl::string_view digits = s.substr(1, dash == absl::string_view::npos ? s.npos : dash - 1);
  const absl::string_view tag = dash == absl::string_view::npos ? "" : s.substr(dash + 1);
  return absl::StartsWith(s, "w") && digits.size() >= 4 &&
         std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit) &&
         (dash == absl::string_view::npos ||
          (tag.size() == 8 && std::all_of(tag.begin(), tag.end(), absl::ascii_isxdigit)));
}

}  // namespace

absl::StatusOr<Revocation> WorkerPool::Revoke(const std::string& what) {
  absl::MutexLock lock(&mu_);
  Revocation r;
  bool by_fingerprint = false;
  if (auto it = workers_.find(what); it != workers_.end()) {
    r.revoked = it->second.identity;
    if (r.revoked.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", what, " has no certificate identity (a plaintext cluster)"));
    }
  } else if (std::optional<std::string> fingerprint = ParseFingerprint(what)) {
    r.revoked = *fingerprint;
    by_fingerprint = true;
  } else if (absl::StartsWith(what, kWorkerCnPrefix)) {
    r.revoked = what.substr(sizeof(kWorkerCnPrefix) - 1);
  } else if (LooksLikeWorkerId(what) && !seen_.contains(what)) {
    return absl::NotFoundError(absl::StrCat(
        "no worker ", what,
        " is registered now (a stale id? a worker gets a new id each time it registers): "
        "`lockstep workers` lists the ids; or name its identity, or its certificate's "
        "fingerprint"));
  } else {
    r.revoked = what;
  }
  if (!by_fingerprint && !ValidWorkerName(r.revoked)) {
    return absl::NotFoundError(absl::StrCat(
        "\"", what,
        "\" is no registered worker's id, worker identity, lockstep-worker/NAME or certificate "
        "fingerprint (sha256:HEX)"));
  }
  if (absl::Status st = revoked_.Add(r.revoked); !st.ok()) return st;
  for (auto it = workers_.begin(); it != workers_.end();) {
    const PoolWorker& w = it->second;
    if ((by_fingerprint ? w.fingerprint : w.identity) == r.revoked) {
      r.dropped.push_back(it->first);
      lost_.push_back({w, absl::StrCat("worker ", it->first, " (identity ", w.identity,
                                       ") was revoked by an admin")});
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  return r;
}

bool WorkerPool::IsRevoked(const std::string& identity) {
  absl::MutexLock lock(&mu_);
  return revoked_.Contains(identity);
}

std::vector<std::string> WorkerPool::Revoked() {
  absl::MutexLock lock(&mu_);
  return {revoked_.entries().begin(), revoked_.entries().end()};
}

std::string WorkerPool::RevokedEnrolledName(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  return revoked_.EnrolledUnder(prefix);
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
    if (QuarantinedLocked(w) == nullptr && !w.leaving && !enrolled_.Pending(w.identity)) {
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
    if (enrolled_.Pending(it->second.identity)) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", id, " awaits an admin's approval"));
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
    info.set_pending_approval(enrolled_.Pending(w.identity));
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace lockstep
