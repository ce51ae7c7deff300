// RevokedWorkers: the worker identities an admin revoked (`lockstep workers revoke`), kept
// in a file of the coordinator's state folder (one identity a line, mode 0600) so that a
// revoked certificate stays refused across restarts. Not thread-safe: its owner
// (WorkerPool) locks.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_WORKERS_REVOKED_WORKERS_H_
#define LOCKSTEP_SERVICES_COORDINATOR_WORKERS_REVOKED_WORKERS_H_

#include <set>
#include <string>

#include "absl/status/statusor.h"

namespace lockstep {

class RevokedWorkers {
 public:
  // None revoked, nothing persisted (tests, --insecure without a state folder).
  RevokedWorkers() = default;
  // The identities in `path` (none if the file does not exist yet); later Adds are written
  // there. INVALID_ARGUMENT naming the file and line for a malformed identity.
  static absl::StatusOr<RevokedWorkers> Load(const std::string& path);

  // Revokes `identity` and rewrites the file (whole or not at all): the system's error
  // naming the file if it cannot be written (then nothing is revoked).
  absl::Status Add(const std::string& identity);
  bool Contains(const std::string& identity) const { return revoked_.contains(identity); }
  size_t size() const { return revoked_.size(); }

 private:
  std::string path_;  // empty: kept in memory only
  std::set<std::string> revoked_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_WORKERS_REVOKED_WORKERS_H_
