// Files that survive a crash at any moment whole: the new contents go to a temporary file
// beside the target, which is fsync'ed and renamed over it, and the folder is fsync'ed. A
// kill -9 or power loss leaves the old file or the new one, never a torn one (a leftover
// "<path>.tmp" may remain; readers ignore it).
#ifndef LOCKSTEP_CORE_IO_DURABLE_FILE_H_
#define LOCKSTEP_CORE_IO_DURABLE_FILE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace lockstep {

// Writes the concatenation of `parts` to `path`. DATA_LOSS naming the file and the system
// error when the disk refuses; PERMISSION_DENIED when the folder cannot be written.
absl::Status WriteFileDurably(const std::string& path, const std::vector<std::string_view>& parts);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_IO_DURABLE_FILE_H_
