// The NCCL collective: Collective::AllReduceSum as ncclAllReduce on a CUDA backend's stream, so
// that a step's all-reduce queues behind its backward pass and can be captured into the step's CUDA
// graph. Contract: nccl_collective.h.
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
    if (watching_) {
      (void)backend_->Synchronize();  // none of our collectives may still be in flight
      (void)backend_->SetSyncWatch(nullptr);
    }
    if (comm_stream_ != nullptr) {
      // Every start was joined into the backend's stream (Wait), which has drained.
      (void)cudaStreamSynchronize(comm_stream_);
      (void)cudaEventDestroy(ready_);
      (void)cudaEventDestroy(joined_);
      (void)cudaStreamDestroy(comm_stream_);
    }
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
    return RunSynchronously(data, n, ncclFloat, ncclSum, options);
  }

  absl::Status AllReduceInt64(int64_t* data, size_t n, ReduceOp op,
                              const CollectiveOptions& options) override {
    return RunSynchronously(data, n, ncclInt64, op == ReduceOp::kSum ? ncclSum : ncclMax, options);
  }

  // On the backend's stream, behind the started all-reduces; waits for it unless the
  // stream is being captured.
  absl::Status RunSynchronously(void* data, size_t n, ncclDataType_t type, ncclRedOp_t op,
                                const CollectiveOptions& options) {
    RETURN_IF_ERROR(watchdog_.Check(absl::ZeroDuration()));
    RETURN_IF_ERROR(comm_->error());
    if (n == 0) return absl::OkStatus();
    RETURN_IF_ERROR(backend_->Activate());
    // Behind the started all-reduces: one NCCL operation at a time, in issue order.
    if (started_ > joined_ticket_) RETURN_IF_ERROR(Join());
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(backend_->stream(), &capture));
    RETURN_IF_ERROR(Enqueue(data, n, type, op, options, backend_->stream()));
    if (capture != cudaStreamCaptureStatusNone) return absl::OkStatus();
    return backend_->Synchronize();
  }

  // On the communication stream, after the work queued so far on the backend's stream (an
  // event fork, which a CUDA graph capture follows into the communication stream).
  absl::StatusOr<CollectiveTicket> StartAllReduceSum(float* data, size_t n,
                                                     const CollectiveOptions& options) override {
    RETURN_IF_ERROR(watchdog_.Check(absl::ZeroDuration()));
    RETURN_IF_ERROR(comm_->error());
    RETURN_IF_ERROR(backend_->Activate());
    if (comm_stream_ == nullptr) {
      CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
      CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
      CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming));
    }
    const CollectiveTicket ticket = ++started_;
    if (n == 0) return ticket;
    CUDA_RETURN_IF_ERROR(cudaEventRecord(ready_, backend_->stream()));
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(comm_stream_, ready_, 0));
    RETURN_IF_ERROR(Enqueue(data, n, ncclFloat, ncclSum, options, comm_stream_));
    return ticket;
  }

  // Joins the communication stream back into the backend's: what the backend queues next
  // waits for every all-reduce started so far (at least `ticket` and those before it).
  // Their errors come from the backend's Synchronize(), through the watchdog.
  absl::Status Wait(CollectiveTicket ticket) override {
    if (ticket > started_) {
      return absl::InvalidArgumentError(absl::StrCat("NCCL all-reduce ticket ", ticket,
                                                     " was never issued (last: ", started_, ")"));
    }
    if (ticket <= joined_ticket_) return absl::OkStatus();
    RETURN_IF_ERROR(backend_->Activate());
    return Join();
  }

 private:
  absl::Status Join() {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(joined_, comm_stream_));
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(backend_->stream(), joined_, 0));
    joined_ticket_ = started_;
    return absl::OkStatus();
  }

  // Queues ncclAllReduce (in place) on `stream`, the watchdog armed for it.
  absl::Status Enqueue(void* data, size_t n, ncclDataType_t type, ncclRedOp_t op,
                       const CollectiveOptions& options, cudaStream_t stream) {
    watchdog_.Arm(options.timeout);
    const ncclResult_t result = ncclAllReduce(data, data, n, type, op, comm_->get(), stream);
    if (result != ncclSuccess && result != ncclInProgress) {
      const absl::Status status =
          NcclStatus(result, "ncclAllReduce", __FILE__, __LINE__, comm_->get());
      if (absl::IsUnavailable(status)) comm_->Abort(status);  // a peer is lost
      return status;
    }
    return comm_->Await(options.timeout, "ncclAllReduce");
  }

  const int rank_, size_;
  CudaBackend* backend_;
  std::unique_ptr<NcclComm> comm_;
  NcclWatchdog watchdog_;
  bool watching_ = false;
  // Overlap: created by the first StartAllReduceSum.
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;         // the backend's stream's work before a start
  cudaEvent_t joined_ = nullptr;        // the communication stream's work before a Wait
  CollectiveTicket started_ = 0;        // the last ticket handed out
  CollectiveTicket joined_ticket_ = 0;  // every ticket up to it is joined
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
