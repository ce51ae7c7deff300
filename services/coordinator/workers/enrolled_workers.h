// EnrolledWorkers: the identities that enrollment issued (WorkerRegistry.Enroll) and
// whether each may take work. The bootstrap token only proves that its holder may *ask* to
// join; an identity it got is pending until an admin approves it (`lockstep workers
// approve`), unless the auto-approval policy covers it: a requested name matching a glob,
// up to a number of approvals in all (as Kubernetes' CSR approvers limit kubelets). A
// pending worker registers and heartbeats but is given no job. Identities the operator
// issued (`lockstep certs --workers`) are not enrolled and need no approval.
//
// Kept in the state folder (STATE_DIR/enrolled-workers, mode 0600, one "IDENTITY STATUS
// NAME" a line, STATUS pending, approved or auto) so that approvals and the count survive
// a restart. Not thread-safe: its owner (WorkerPool) locks.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_WORKERS_ENROLLED_WORKERS_H_
#define LOCKSTEP_SERVICES_COORDINATOR_WORKERS_ENROLLED_WORKERS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

struct ApprovalPolicy {
  // A glob (fnmatch: * ? [...]) on the requested name (Enrollment::IdentityPrefix's);
  // empty: nothing is approved without an admin.
  std::string auto_approve;
  int auto_approve_max = 0;  // auto-approvals in all, over the coordinator's lifetimes
};

class EnrolledWorkers {
 public:
  enum class Status { kPending, kApproved, kAuto };
  struct Entry {
    std::string identity, name;
    Status status = Status::kPending;
  };

  // Nothing enrolled, nothing persisted (tests).
  EnrolledWorkers() = default;
  // The entries in `path` (none if the file does not exist yet); later changes are
  // written there. INVALID_ARGUMENT naming the file and line for a malformed one.
  static absl::StatusOr<EnrolledWorkers> Load(const std::string& path);

  // Records `identity`, just issued for the requested `name`: auto-approved when `policy`
  // covers it, else pending. Returns the entry. The file's error if it cannot be written
  // (then nothing is recorded, and the identity must not be issued).
  absl::StatusOr<Entry> Add(const std::string& identity, const std::string& name,
                            const ApprovalPolicy& policy);
  // Approves an enrolled identity. NOT_FOUND if enrollment did not issue it; the file's
  // error.
  absl::Status Approve(const std::string& identity);
  // Whether `identity` was enrolled and is not approved yet.
  bool Pending(const std::string& identity) const;
  std::vector<Entry> entries() const;

 private:
  absl::Status Write(const std::map<std::string, Entry>& entries) const;

  std::string path_;  // empty: kept in memory only
  std::map<std::string, Entry> by_identity_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_WORKERS_ENROLLED_WORKERS_H_
