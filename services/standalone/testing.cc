#include "services/standalone/testing.h"

#include "absl/strings/str_cat.h"
#include "workers/gloo/gloo_collective.h"

namespace lockstep::testing {
namespace {

// A MemoryStore whose waits end early with CANCELLED once `cancel` is cancelled, as the
// coordinator's rendezvous does for a worker.
class CancellableStore final : public Store {
 public:
  CancellableStore(Store* base, const CancelToken& cancel) : base_(base), cancel_(cancel) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    if (absl::Status st = cancel_.status(); !st.ok()) return st;
    return base_->Set(key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    const absl::Time end = absl::Now() + timeout;
    while (true) {  // in slices, so that a cancel is seen within one
      if (absl::Status st = cancel_.status(); !st.ok()) return st;
      const absl::Duration left = end - absl::Now();
      auto v = base_->Get(key, std::min(left, absl::Milliseconds(20)));
      if (v.ok() || left <= absl::Milliseconds(20)) return v;
    }
  }

 private:
  Store* base_;
  const CancelToken& cancel_;
};

class LoopbackCollectives final : public CollectiveFactory {
 public:
  explicit LoopbackCollectives(Store* store) : store_(store) {}
  absl::StatusOr<std::unique_ptr<Collective>> Create(int rank, int size, const std::string& prefix,
                                                     absl::Duration timeout, Backend*,
                                                     const CancelToken& cancel) override {
    CancellableStore store(store_, cancel);
    GlooOptions options;
    options.hostname = "127.0.0.1";
    options.prefix = prefix;
    options.connect_timeout = timeout;
    return GlooCollective::Create(rank, size, &store, options);
  }

 private:
  Store* store_;
};

}  // namespace

InProcessWorkers::InProcessWorkers(int n, Store* store)
    : backends_(*BackendSource::Create("cpu", 1)),
      collectives_(std::make_unique<LoopbackCollectives>(store != nullptr ? store : &store_)) {
  std::map<std::string, JobSlot*> by_address;
  for (int r = 0; r < n; ++r) {
    slots_.push_back(std::make_unique<JobSlot>(backends_.get(), &datasets_, collectives_.get()));
    by_address[absl::StrCat("in-process:", r)] = slots_.back().get();
  }
  factory_ = std::make_unique<InProcessWorkerFactory>(std::move(by_address));
}

InProcessWorkers::~InProcessWorkers() = default;

std::vector<PoolWorker> InProcessWorkers::pool_workers() const {
  std::vector<PoolWorker> out;
  for (size_t r = 0; r < slots_.size(); ++r) {
    PoolWorker w;
    w.id = absl::StrCat("w", r);
    w.address = absl::StrCat("in-process:", r);
    w.device = "cpu";
    w.threads = 1;
    out.push_back(w);
  }
  return out;
}

}  // namespace lockstep::testing
