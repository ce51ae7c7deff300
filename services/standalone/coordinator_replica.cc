// CoordinatorReplica: the coordinator's own replica for the replay audit. Contract:
// coordinator_replica.h.
#include "services/standalone/coordinator_replica.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/spec/memory.h"
#include "services/standalone/in_process_worker.h"
#include "workers/backend_factory.h"

namespace lockstep {

// The loan: the job's backend, a slot over it and the client reaching it; the replica is
// free again once it is destroyed.
class CoordinatorReplica::Lent final : public WorkerClient {
 public:
  Lent(CoordinatorReplica* owner, std::unique_ptr<BackendSource> backends)
      : owner_(owner),
        backends_(std::move(backends)),
        slot_(std::make_unique<JobSlot>(backends_.get(), &owner->datasets_, nullptr)),
        client_(NewInProcessWorkerClient(slot_.get())) {}
  ~Lent() override {
    client_.reset();
    slot_.reset();
    owner_->Return();
  }

  absl::StatusOr<PrepareResult> Prepare(const JobAssignment& job,
                                        std::shared_ptr<const SharedState> state,
                                        const CancelToken& cancel,
                                        absl::Duration timeout) override {
    return client_->Prepare(job, std::move(state), cancel, timeout);
  }
  absl::StatusOr<std::unique_ptr<StepStream>> OpenSteps(const std::string& job_id,
                                                        const CancelToken& cancel,
                                                        absl::Duration lifetime) override {
    return client_->OpenSteps(job_id, cancel, lifetime);
  }
  absl::StatusOr<EvalSums> Evaluate(const std::string& job_id, int64_t begin, int64_t end,
                                    const CancelToken& cancel, absl::Duration timeout) override {
    return client_->Evaluate(job_id, begin, end, cancel, timeout);
  }
  absl::StatusOr<TrainState> FetchState(const std::string& job_id, const CancelToken& cancel,
                                        absl::Duration timeout) override {
    return client_->FetchState(job_id, cancel, timeout);
  }
  absl::Status Release(const std::string& job_id, const std::string& reason,
                       absl::Duration timeout) override {
    return client_->Release(job_id, reason, timeout);
  }
  bool Alive(absl::Duration timeout) override { return client_->Alive(timeout); }

 private:
  CoordinatorReplica* const owner_;
  const std::unique_ptr<BackendSource> backends_;
  std::unique_ptr<JobSlot> slot_;
  std::unique_ptr<WorkerClient> client_;
};

CoordinatorReplica::CoordinatorReplica(DataRoots roots, std::string index_cache_dir,
                                       int max_threads, uint64_t max_bytes)
    : roots_(roots),
      max_threads_(max_threads),
      max_bytes_(max_bytes),
      datasets_(1, roots, std::move(index_cache_dir)) {}

CoordinatorReplica::~CoordinatorReplica() = default;

absl::Status CoordinatorReplica::CheckReadable(const v1::DatasetSpec& dataset) const {
  for (const auto& [field, path] :
       {std::pair<const char*, const std::string&>{"dataset.path", dataset.path()},
        {"dataset.train_path", dataset.train_path()},
        {"dataset.test_path", dataset.test_path()}}) {
    if (path.empty()) continue;
    absl::StatusOr<std::string> resolved = roots_.Resolve(field, path);
    if (!resolved.ok()) return absl::FailedPreconditionError(resolved.status().message());
    if (access(resolved->c_str(), R_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          field, ": \"", path, "\" cannot be read by the coordinator: ", std::strerror(errno),
          " (mount the workers' datasets at the coordinator, read-only, inside its "
          "--data_root)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WorkerClient>> CoordinatorReplica::Lend(const v1::JobSpec& spec,
                                                                       int threads) {
  if (threads > max_threads_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job computes with ", threads, " threads, the replica at most ",
                     max_threads_, " (--audit_local_replica_max_threads)"));
  }
  // One worker holding the whole job (all V replicas with logical replicas), without an
  // evaluation or a process of its own.
  v1::JobSpec alone = spec;
  alone.set_workers(1);
  const MemoryEstimate m = EstimateMemory(alone);
  const uint64_t need = m.worker_state + m.worker_activations + m.worker_dataset;
  if (need > max_bytes_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the replay needs about ", need >> 20, " MiB (state ", m.worker_state >> 20,
        ", activations ", m.worker_activations >> 20, ", dataset ", m.worker_dataset >> 20,
        "), the replica at most ", max_bytes_ >> 20, " MiB (--audit_local_replica_memory_mb)"));
  }
  if (absl::Status st = CheckReadable(spec.dataset()); !st.ok()) return st;
  absl::StatusOr<std::unique_ptr<BackendSource>> backends = BackendSource::Create("cpu", threads);
  if (!backends.ok()) return absl::FailedPreconditionError(backends.status().message());
  {
    absl::MutexLock lock(&mu_);
    if (lent_) return absl::UnavailableError("it is replaying another job's steps");
    lent_ = true;
  }
  return std::make_unique<Lent>(this, *std::move(backends));
}

void CoordinatorReplica::Return() {
  absl::MutexLock lock(&mu_);
  lent_ = false;
}

}  // namespace lockstep
