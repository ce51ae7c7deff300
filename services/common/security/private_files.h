// Private by default: what a Lockstep server or command writes is its owner's alone. The
// coordinator's state folder holds every user's specs, weights and logs, and a cluster's
// credentials folder its keys and tokens: another local user must read none of it, whatever
// the umask the process was started with.
//
// The servers and `lockstep cluster up`, `train` and `certs` call SetPrivateUmask first,
// so that every folder they create is 0700 and every file 0600; the coordinator tightens a
// state folder left with looser modes (MakeFolderPrivate).
#ifndef LOCKSTEP_SERVICES_COMMON_SECURITY_PRIVATE_FILES_H_
#define LOCKSTEP_SERVICES_COMMON_SECURITY_PRIVATE_FILES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lockstep {

// umask 077: files and folders created from now on carry no group or other permissions.
// Process-wide; call at the start of main, before threads.
void SetPrivateUmask();

// What TightenModes did.
struct Tightened {
  int changed = 0;  // entries whose group and other permissions it removed
  // Entries left as they were because another user owns them (EPERM), e.g. a Kubernetes
  // volume's root that the kubelet gave to root and the pod's fsGroup; the first one's path.
  int not_ours = 0;
  std::string first_not_ours;
};

// Removes the group and other permissions of `dir` and of everything under it (symlinks
// are neither followed nor changed). NOT_FOUND when `dir` does not exist; PERMISSION_DENIED
// naming the entry it could not read or change for another reason than its owner.
absl::StatusOr<Tightened> TightenModes(const std::string& dir);

// Creates `dir` (0700) if it is missing and tightens it (TightenModes), saying so in one log
// line when something was open to others (and what it could not change, not being its
// owner). `what` names it in that line and in errors ("--state_dir"). PERMISSION_DENIED
// naming the folder when it cannot be created or read.
absl::Status MakeFolderPrivate(const std::string& what, const std::string& dir);

// Writes `data` to `path` readable by the owner only (0600, also when the file existed with
// looser modes), whole or not at all (a temporary file, then rename). PERMISSION_DENIED
// naming the file when it cannot be created, DATA_LOSS when it cannot be written whole.
absl::Status WritePrivate(const std::string& path, const std::string& data);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_SECURITY_PRIVATE_FILES_H_
