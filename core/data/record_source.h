// The records format's ExampleSource: a .npy file of uint8 [N, H, W, C] read in place,
// one image by its offset, and its labels from the .npy beside it (RecordLabelsPath:
// train.npy -> train.labels.npy), [N] of any integer dtype, each >= 0, held in memory
// (8 bytes an example). The fastest path for decoded data: a read is one pread of
// H * W * C bytes.
//
// Thread safety: as ExampleSource.
#ifndef LOCKSTEP_CORE_DATA_RECORD_SOURCE_H_
#define LOCKSTEP_CORE_DATA_RECORD_SOURCE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/data/data_roots.h"
#include "core/data/example_source.h"

namespace lockstep {

// Opens the record file `path` that the spec's `field` names (dataset.train_path), inside
// `roots` when given. Errors name the field and the file: FAILED_PRECONDITION for a
// missing file, INVALID_ARGUMENT for a path outside the roots, not a .npy, a dtype other
// than uint8, a shape other than [N, H, W, C] or labels that do not match (count, integer
// dtype, a negative label: its index), DATA_LOSS for a file shorter or longer than its
// header says.
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenRecordSource(const std::string& path,
                                                                const std::string& field,
                                                                const DataRoots* roots);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_RECORD_SOURCE_H_
