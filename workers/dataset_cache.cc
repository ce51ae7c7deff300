// DatasetCache: the train and test splits a worker's jobs read, loaded once per dataset (its folder
// or files, keys and normalization) and kept in host memory for later jobs. Contract:
// dataset_cache.h.
#include "workers/dataset_cache.h"

#include "core/status_macros.h"

namespace lockstep {

absl::StatusOr<JobData> DatasetCache::ForJob(const v1::DatasetSpec& spec) {
  JobData data;
  if (IsStreamedFormat(spec.format())) {
    ASSIGN_OR_RETURN(data.streamed, GetStreamed(spec));
  } else {
    ASSIGN_OR_RETURN(data.resident, Get(spec));
  }
  return data;
}

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
  if (Entry* e = Find(key); e != nullptr && e->data != nullptr) return e->data;
  ASSIGN_OR_RETURN(Datasets loaded, LoadDatasets(spec, roots_));
  auto d = std::make_shared<const Datasets>(std::move(loaded));
  Insert(key, Entry{d, nullptr});
  return d;
}

absl::StatusOr<std::shared_ptr<const StreamedSplits>> DatasetCache::GetStreamed(
    const v1::DatasetSpec& spec) {
  // Keyed by the whole dataset spec: the sources resolve (and check) their paths
  // against the roots themselves, on every open.
  const std::string key = "streamed:" + spec.SerializeAsString();
  absl::MutexLock lock(&mu_);
  if (Entry* e = Find(key); e != nullptr && e->streamed != nullptr) return e->streamed;
  SourceOptions options;
  options.roots = &roots_;
  options.cache_dir = index_cache_dir_;
  auto splits = std::make_shared<StreamedSplits>();
  ASSIGN_OR_RETURN(splits->train, OpenExampleSource(spec, Split::kTrain, options));
  ASSIGN_OR_RETURN(splits->test, OpenExampleSource(spec, Split::kTest, options));
  Insert(key, Entry{nullptr, splits});
  return splits;
}

DatasetCache::Entry* DatasetCache::Find(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  it->second.last_use = ++uses_;
  return &it->second;
}

void DatasetCache::Insert(const std::string& key, Entry entry) {
  while (!entries_.empty() && entries_.size() >= capacity_) {
    auto lru = entries_.begin();
    for (auto i = entries_.begin(); i != entries_.end(); ++i) {
      if (i->second.last_use < lru->second.last_use) lru = i;
    }
    entries_.erase(lru);
  }
  entry.last_use = ++uses_;
  entries_[key] = std::move(entry);
}

absl::StatusOr<std::shared_ptr<const Datasets>> DatasetCache::GetIdx(const std::string& path) {
  v1::DatasetSpec spec;
  spec.set_format("idx");
  spec.set_path(path);
  return Get(spec);
}

}  // namespace lockstep
