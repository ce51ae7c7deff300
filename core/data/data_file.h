// Opening a streamed dataset's file inside the worker's data roots.
#ifndef LOCKSTEP_CORE_DATA_DATA_FILE_H_
#define LOCKSTEP_CORE_DATA_DATA_FILE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/data/data_roots.h"
#include "core/io/random_access_file.h"

namespace lockstep {

// `path`, which the spec's `field` names, resolved inside `roots` (when not null) and
// opened; messages call it "FIELD: PATH", the path as the spec wrote it, never as
// resolved. DataRoots::Resolve's INVALID_ARGUMENT, RandomAccessFile::Open's
// FAILED_PRECONDITION.
inline absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenDataFile(const std::string& path,
                                                                      const std::string& field,
                                                                      const DataRoots* roots) {
  std::string resolved = path;
  if (roots != nullptr) {
    absl::StatusOr<std::string> r = roots->Resolve(field, path);
    if (!r.ok()) return r.status();
    resolved = *std::move(r);
  }
  return RandomAccessFile::Open(resolved, field + ": " + path);
}

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_DATA_FILE_H_
