#include "services/standalone/testing.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "services/coordinator/scheduling/job_manager_testing.h"
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

std::string TempDir(const std::string& name) {
  std::string templ =
      (std::filesystem::temp_directory_path() / absl::StrCat("lockstep-", name, ".XXXXXX"))
          .string();
  if (mkdtemp(templ.data()) == nullptr) {
    std::perror(templ.c_str());
    std::abort();  // a test helper: nothing can run without its folder
  }
  return templ;
}

absl::StatusOr<JobOutcome> RunInProcess(const v1::JobSpec& spec, const CoordinatorOptions& options,
                                        JobSink* sink, std::string job_id) {
  InProcessWorkers workers(static_cast<int>(spec.workers()));
  if (job_id.empty()) job_id = spec.checkpoint_path();
  JobRunner runner(job_id, spec, workers.pool_workers(), workers.factory(), options, sink);
  JobOutcome out;
  RETURN_IF_ERROR(runner.Run(&out));
  return out;
}

CoordinatorOptions OptionsIn(const std::string& dir) {
  CoordinatorOptions options;
  options.checkpoint_dir = dir + "/checkpoints";
  options.records_dir = dir + "/jobs";
  options.snapshot_dir = dir + "/snapshots";
  return options;
}

InProcessCoordinator::InProcessCoordinator(const CoordinatorOptions& options,
                                           InProcessWorkers* workers, bool with_workers)
    : pool(absl::Hours(1)), jobs(options, &pool, nullptr, workers->factory()) {
  if (with_workers) Register(*workers);
}

void InProcessCoordinator::Register(InProcessWorkers& workers) {
  for (const PoolWorker& w : workers.pool_workers()) pool.Register(w.address, "cpu", w.id, 1);
  jobs.Kick();
}

absl::StatusOr<uint64_t> UndisturbedChecksum(InProcessWorkers& workers, const v1::JobSpec& spec) {
  const std::string dir = TempDir("undisturbed");
  absl::StatusOr<v1::Job> done;
  {
    InProcessCoordinator c(OptionsIn(dir), &workers);
    if (absl::Status st = c.jobs.Start(); !st.ok()) {
      done = st;
    } else if (absl::StatusOr<v1::Job> job = c.jobs.Submit(spec); !job.ok()) {
      done = job.status();
    } else {
      done = AwaitEnd(c.jobs, job->id(), absl::Minutes(2));
    }
  }
  std::filesystem::remove_all(dir);
  RETURN_IF_ERROR(done.status());
  if (done->state() != v1::SUCCEEDED) {
    return absl::InternalError(absl::StrCat("the undisturbed run of ", done->id(), " ended ",
                                            v1::JobState_Name(done->state()), ": ",
                                            done->failure_reason()));
  }
  return done->param_checksum();
}

}  // namespace lockstep::testing
