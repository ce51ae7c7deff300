#include "workers/dataset_cache.h"

#include "core/status_macros.h"

namespace lockstep {

absl::StatusOr<std::shared_ptr<const Datasets>> DatasetCache::Get(const std::string& spec_path) {
  // Before anything else: a path outside the roots is not even looked up.
  ASSIGN_OR_RETURN(const std::string path, roots_.Resolve("dataset.path", spec_path));
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(path);
  if (it != entries_.end()) {
    it->second.last_use = ++uses_;
    return it->second.data;
  }
  auto d = std::make_shared<Datasets>();
  ASSIGN_OR_RETURN(d->train, LoadIdxDataset(path, Split::kTrain, uint64_t{1} << 31, roots_));
  ASSIGN_OR_RETURN(d->test, LoadIdxDataset(path, Split::kTest, uint64_t{1} << 31, roots_));
  while (!entries_.empty() && entries_.size() >= capacity_) {
    auto lru = entries_.begin();
    for (auto i = entries_.begin(); i != entries_.end(); ++i) {
      if (i->second.last_use < lru->second.last_use) lru = i;
    }
    entries_.erase(lru);
  }
  entries_[path] = Entry{d, ++uses_};
  return d;
}

}  // namespace lockstep
