// DatasetCache: the train and test splits a worker's jobs read, loaded once per dataset
// (its folder or files, keys and normalization) and kept in host memory for later jobs;
// past `capacity` datasets the least recently used is dropped (a job still using it
// keeps its copy alive). Only files inside its data roots are read (none: any).
// Thread-safe; loads are serialized.
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
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

class DatasetCache {
 public:
  explicit DatasetCache(size_t capacity = 2, DataRoots roots = {})
      : capacity_(capacity), roots_(std::move(roots)) {}

  // The splits `spec` (a validated spec's dataset) names: INVALID_ARGUMENT naming
  // dataset.path, dataset.train_path or dataset.test_path when it lies outside the data
  // roots, alike whether or not it exists (DataRoots::Resolve); LoadDatasets's errors
  // (FAILED_PRECONDITION naming a missing file, ...).
  absl::StatusOr<std::shared_ptr<const Datasets>> Get(const v1::DatasetSpec& spec);
  // The IDX folder `path` (Fashion-MNIST's layout), not normalized.
  absl::StatusOr<std::shared_ptr<const Datasets>> GetIdx(const std::string& path);

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
