// DatasetCache: the train and test splits a worker's jobs read, loaded once per dataset (its folder
// or files, keys and normalization) and kept in host memory for later jobs. Contract:
// dataset_cache.h.
#include "workers/dataset_cache.h"

#include "core/status_macros.h"

namespace lockstep {

absl::StatusOr<std::shared_ptr<const Datasets>> DatasetCache::Get(const v1::DatasetSpec& in) {
  // Before anything else: a path outside the roots is not even looked up. The key is
  // the spec with its paths resolved (two spellings of one file share an entry).
  v1::DatasetSpec spec = in;
  spec.clear_name();
  if (spec.format().empty()) spec.set_format("idx");
  // Formats of two files (images or tokens) against idx's folder.
  if (spec.format() == "npz" || spec.format() == "text" || spec.format() == "tokens") {
    ASSIGN_OR_RETURN(*spec.mutable_train_path(),
                     roots_.Resolve("dataset.train_path", spec.train_path()));
    ASSIGN_OR_RETURN(*spec.mutable_test_path(),
                     roots_.Resolve("dataset.test_path", spec.test_path()));
  } else {
    ASSIGN_OR_RETURN(*spec.mutable_path(), roots_.Resolve("dataset.path", spec.path()));
  }
  const std::string key = spec.SerializeAsString();
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    it->second.last_use = ++uses_;
    return it->second.data;
  }
  ASSIGN_OR_RETURN(Datasets loaded, LoadDatasets(spec, roots_));
  auto d = std::make_shared<const Datasets>(std::move(loaded));
  while (!entries_.empty() && entries_.size() >= capacity_) {
    auto lru = entries_.begin();
    for (auto i = entries_.begin(); i != entries_.end(); ++i) {
      if (i->second.last_use < lru->second.last_use) lru = i;
    }
    entries_.erase(lru);
  }
  entries_[key] = Entry{d, ++uses_};
  return d;
}

absl::StatusOr<std::shared_ptr<const Datasets>> DatasetCache::GetIdx(const std::string& path) {
  v1::DatasetSpec spec;
  spec.set_format("idx");
  spec.set_path(path);
  return Get(spec);
}

}  // namespace lockstep
