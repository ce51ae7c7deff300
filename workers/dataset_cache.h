// DatasetCache: the train and test splits a worker's jobs read, loaded once per directory
// and kept in host memory for later jobs; past `capacity` directories the least recently
// used is dropped (a job still using it keeps its copy alive). Only directories inside
// its data roots are read (none: any). Thread-safe; loads are serialized.
#ifndef LOCKSTEP_WORKERS_DATASET_CACHE_H_
#define LOCKSTEP_WORKERS_DATASET_CACHE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/data/data_roots.h"
#include "core/data/dataset.h"

namespace lockstep {

struct Datasets {
  Dataset train, test;
};

class DatasetCache {
 public:
  explicit DatasetCache(size_t capacity = 2, DataRoots roots = {})
      : capacity_(capacity), roots_(std::move(roots)) {}

  // The splits under `path` (spec.dataset.path): INVALID_ARGUMENT naming dataset.path
  // when it lies outside the data roots, alike whether or not it exists
  // (DataRoots::Resolve); LoadIdxDataset's errors (FAILED_PRECONDITION naming a missing
  // file, ...).
  absl::StatusOr<std::shared_ptr<const Datasets>> Get(const std::string& path);

 private:
  struct Entry {
    std::shared_ptr<const Datasets> data;
    uint64_t last_use = 0;
  };
  const size_t capacity_;
  const DataRoots roots_;
  absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t uses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_DATASET_CACHE_H_
