// RevokedWorkers: the worker certificates an admin revoked (`lockstep workers revoke`), by
// identity (the worker name in the certificate's CN) or by fingerprint ("sha256:HEX", one
// certificate), kept in a file of the coordinator's state folder (one a line, mode 0600)
// so that a revoked certificate stays refused across restarts. Not thread-safe: its owner
// (WorkerPool) locks.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_WORKERS_REVOKED_WORKERS_H_
#define LOCKSTEP_SERVICES_COORDINATOR_WORKERS_REVOKED_WORKERS_H_

#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

class RevokedWorkers {
 public:
  // None revoked, nothing persisted (tests, --insecure without a state folder).
  RevokedWorkers() = default;
  // The entries in `path` (none if the file does not exist yet); later Adds are written
  // there. INVALID_ARGUMENT naming the file and line for one that is neither an identity
  // nor a fingerprint.
  static absl::StatusOr<RevokedWorkers> Load(const std::string& path);

  // Revokes `entry` (an identity, or a fingerprint as ParseFingerprint writes it) and
  // rewrites the file (whole or not at all): the system's error naming the file if it
  // cannot be written (then nothing is revoked).
  absl::Status Add(const std::string& entry);
  bool Contains(const std::string& entry) const {
    return !entry.empty() && revoked_.contains(entry);
  }
  // The revoked identity that enrollment issued for the name `prefix` (PREFIX-<16 hex
  // digits>, Enrollment::IdentityPrefix), or "" if none is revoked.
  std::string EnrolledUnder(absl::string_view prefix) const;
  const std::set<std::string>& entries() const { return revoked_; }

 private:
  std::string path_;  // empty: kept in memory only
  std::set<std::string> revoked_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_WORKERS_REVOKED_WORKERS_H_
