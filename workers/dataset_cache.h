// DatasetCache: the train and test splits a worker's jobs read, loaded once per dataset
// (its folder or files, keys and normalization) and kept in host memory for later jobs;
// past `capacity` datasets the least recently used is dropped (a job still using it
// keeps its copy alive). Streamed datasets (TFRecord shards, image folders, record files)
// are kept the same way but only opened: their indexes, never their examples. Only files
// inside its data roots are read (none: any). Thread-safe; loads are serialized.
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
#include "core/data/example_source.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

// A streamed dataset's two splits, opened (core/data/example_source.h).
struct StreamedSplits {
  std::shared_ptr<const ExampleSource> train, test;
};

// What a job's replica reads: its splits in memory, or streamed (exactly one is set).
struct JobData {
  std::shared_ptr<const Datasets> resident;
  std::shared_ptr<const StreamedSplits> streamed;
};

class DatasetCache {
 public:
  // `index_cache_dir`: where streamed sources may write the indexes they cannot write
  // beside their files (SourceOptions::cache_dir; empty: none).
  explicit DatasetCache(size_t capacity = 2, DataRoots roots = {}, std::string index_cache_dir = {})
      : capacity_(capacity),
        roots_(std::move(roots)),
        index_cache_dir_(std::move(index_cache_dir)) {}

  // Get or GetStreamed, by the spec's format (IsStreamedFormat).
  absl::StatusOr<JobData> ForJob(const v1::DatasetSpec& spec);
  // The streamed splits `spec` names: OpenExampleSource's errors.
  absl::StatusOr<std::shared_ptr<const StreamedSplits>> GetStreamed(const v1::DatasetSpec& spec);

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
    std::shared_ptr<const StreamedSplits> streamed;
    uint64_t last_use = 0;
  };
  // The entry under `key`, marked used, or null (mu_ held).
  Entry* Find(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `entry`, dropping the least recently used past capacity_ (mu_ held).
  void Insert(const std::string& key, Entry entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  const DataRoots roots_;
  const std::string index_cache_dir_;
  absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t uses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_DATASET_CACHE_H_
