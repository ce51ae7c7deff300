#include "workers/nccl/nccl_collective.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "workers/cuda/cuda_backend_impl.h"
#include "workers/cuda/cuda_status.h"
#include "workers/nccl/nccl_comm.h"
#include "workers/nccl/nccl_status.h"
#include "workers/nccl/nccl_watchdog.h"

namespace lockstep {
namespace {

class NcclCollective final : public Collective {
 public:
  NcclCollective(int rank, int size, CudaBackend* backend, std::unique_ptr<NcclComm> comm)
      : rank_(rank),
        size_(size),
        backend_(backend),
        comm_(std::move(comm)),
        watchdog_(comm_.get(), absl::StrCat("NCCL rank ", rank, " of ", size)) {}

  ~NcclCollective() override {
    if (!watching_) return;
    (void)backend_->Synchronize();  // none of our collectives may still be in flight
    (void)backend_->SetSyncWatch(nullptr);
  }

  // Has the backend's Synchronize() consult the watchdog.
  absl::Status Watch() {
    RETURN_IF_ERROR(
        backend_->SetSyncWatch([this](absl::Duration waited) { return watchdog_.Check(waited); }));
    watching_ = true;
    return absl::OkStatus();
  }

  std::string Name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // The driving thread aborts the communicator at its next wait for the stream.
  void Abort(const absl::Status& why) override { watchdog_.RequestAbort(why); }

  absl::Status AllReduceSum(float* data, size_t n, const CollectiveOptions& options) override {
    RETURN_IF_ERROR(watchdog_.Check(absl::ZeroDuration()));
    RETURN_IF_ERROR(comm_->error());
    if (n == 0) return absl::OkStatus();
    RETURN_IF_ERROR(backend_->Activate());
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(backend_->stream(), &capture));
    watchdog_.Arm(options.timeout);
    const ncclResult_t result =
        ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm_->get(), backend_->stream());
    if (result != ncclSuccess && result != ncclInProgress) {
      const absl::Status status =
          NcclStatus(result, "ncclAllReduce", __FILE__, __LINE__, comm_->get());
      if (absl::IsUnavailable(status)) comm_->Abort(status);  // a peer is lost
      return status;
    }
    RETURN_IF_ERROR(comm_->Await(options.timeout, "ncclAllReduce"));
    if (capture != cudaStreamCaptureStatusNone) return absl::OkStatus();
    return backend_->Synchronize();
  }

 private:
  const int rank_, size_;
  CudaBackend* backend_;
  std::unique_ptr<NcclComm> comm_;
  NcclWatchdog watchdog_;
  bool watching_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> NewNcclCollective(
    int rank, int size, Store* store, Backend* backend, const NcclCollectiveOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL collective: rank ", rank, " is not in [0, ", size, ")"));
  }
  CudaBackend* cuda = CudaBackend::From(backend);
  if (cuda == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL collective needs a CUDA backend, not \"", backend->Name(), "\""));
  }
  if (cuda->watched()) {
    return absl::FailedPreconditionError(
        absl::StrCat(cuda->Name(), " already has a collective; one per backend"));
  }
  RETURN_IF_ERROR(cuda->Activate());  // NCCL binds the communicator to the current device
  ASSIGN_OR_RETURN(std::unique_ptr<NcclComm> comm,
                   NcclComm::Create(rank, size, store, options.key, options.timeout));
  auto collective = std::make_unique<NcclCollective>(rank, size, cuda, std::move(comm));
  RETURN_IF_ERROR(collective->Watch());
  return collective;
}

}  // namespace lockstep
