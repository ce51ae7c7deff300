// FolderLock: one process at a time in a folder. The coordinator takes its --state_dir's
// lock at the start and holds it until it exits: a second coordinator started on the same
// folder (by mistake, or a pod rescheduled while the old one still runs) would recover the
// same jobs in its own view and both would write their records. The lock is flock(2) on
// FOLDER/LOCK, released by the kernel however the holder ends (a SIGKILL, a crash), so a
// restart never finds a stale lock; the file names the holder (pid and host) for the error
// the next one reports.
#ifndef LOCKSTEP_SERVICES_COMMON_FOLDER_LOCK_H_
#define LOCKSTEP_SERVICES_COMMON_FOLDER_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace lockstep {

class FolderLock {
 public:
  // Takes `dir`'s lock (the folder must exist). FAILED_PRECONDITION naming `what`, the
  // folder and the holder's pid and host when another holds it (another process, or
  // another FolderLock of this one); PERMISSION_DENIED naming the lock file when it cannot
  // be opened.
  static absl::StatusOr<std::unique_ptr<FolderLock>> Acquire(const std::string& what,
                                                             const std::string& dir);
  ~FolderLock();  // releases it
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  explicit FolderLock(int fd) : fd_(fd) {}
  const int fd_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_FOLDER_LOCK_H_
