// Files that survive a crash at any moment whole: the new contents go to a temporary file
// beside the target, which is fsync'ed and renamed over it, and the folder is fsync'ed. A
// kill -9 or power loss leaves the old file or the new one, never a torn one.
//
// Each write has a temporary file of its own, "<path>.<6 random characters>.tmp" (created
// exclusively), so that two writers of one path never write into the same temporary file
// and rename the other's half-written bytes into place. A kill leaves its temporary file
// behind: readers skip names ending in ".tmp", and the folder's owner removes them with
// RemoveTemporaryFiles.
#ifndef LOCKSTEP_CORE_IO_DURABLE_FILE_H_
#define LOCKSTEP_CORE_IO_DURABLE_FILE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace lockstep {

// Writes the concatenation of `parts` to `path`. DATA_LOSS naming the file and the system
// error when the disk refuses; PERMISSION_DENIED when the folder cannot be written. A failed
// write leaves the old file as it was and no temporary file.
absl::Status WriteFileDurably(const std::string& path, const std::vector<std::string_view>& parts);

// Whether WriteFileDurably(path) can work: the folder exists or can be made, and takes a
// new file (tried with a temporary file, removed at once). PERMISSION_DENIED naming the
// path and the system's reason otherwise. For failing before hours of work, not after.
absl::Status CheckWritable(const std::string& path);

// Whether `filename` (no folder) is a temporary file of WriteFileDurably: any "<name>.tmp",
// so that folders written with WriteFileDurably hold no other such names.
bool IsTemporaryFileName(std::string_view filename);

// Removes the temporary files that killed WriteFileDurably calls left in `dir` (not below
// it), and returns how many. Safe at any moment, from any process: a write in flight holds
// a lock on its file (flock, released when its process dies), and its file is left be.
int RemoveTemporaryFiles(const std::string& dir);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_IO_DURABLE_FILE_H_
