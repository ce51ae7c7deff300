// AppendFile: a file that grows by whole appends, for logs and event files written while a
// job runs. An append that the disk refuses (a full disk, a quota) leaves the file as it
// was, not with a torn tail, so that a writer can keep what it could not write and append
// it again once there is room: the file then reads as if the disk had never been full.
//
// Thread safety: one writer at a time.
#ifndef LOCKSTEP_CORE_IO_APPEND_FILE_H_
#define LOCKSTEP_CORE_IO_APPEND_FILE_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace lockstep {

class AppendFile {
 public:
  virtual ~AppendFile() = default;

  // Opens (creating if missing, mode 0666 less the umask) `path` for appending.
  // PERMISSION_DENIED or NOT_FOUND naming the file and the system's reason.
  static absl::StatusOr<std::unique_ptr<AppendFile>> Open(const std::string& path);

  // Appends all of `data`, or nothing: on failure the file is cut back to its length
  // before. RESOURCE_EXHAUSTED for a full disk or quota (ENOSPC, EDQUOT), DATA_LOSS for
  // other errors; both name the file and the system's reason.
  virtual absl::Status Append(std::string_view data) = 0;
};

// How writers open their files: AppendFile::Open, or a test's.
using AppendFileOpener =
    std::function<absl::StatusOr<std::unique_ptr<AppendFile>>(const std::string& path)>;

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_IO_APPEND_FILE_H_
