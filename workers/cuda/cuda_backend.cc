// CudaBackend's setup, memory, synchronization and graphs; the kernels are in
// cuda_backend_ops.cc.
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "workers/cuda/bias_plan.h"
#include "workers/cuda/cuda_backend_impl.h"
#include "workers/cuda/cuda_status.h"

namespace lockstep {
namespace {

// cuBLAS's recommended workspace on Hopper (4 MiB suffices before it). Set explicitly
// so that GEMMs allocate nothing while a graph is being captured.
constexpr size_t kCublasWorkspace = size_t{32} << 20;
// Synchronize() with a watch polls the stream: spinning at first (steps are short),
// then sleeping between polls.
constexpr absl::Duration kSpin = absl::Milliseconds(2);
// How long Synchronize() still waits for the stream to drain after its watch failed.
constexpr absl::Duration kDrainGrace = absl::Seconds(10);

class CudaGraph final : public Backend::Graph {
 public:
  CudaGraph(CudaBackend* backend, cudaGraphExec_t exec) : backend_(backend), exec_(exec) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }

  absl::Status Launch() override {
    RETURN_IF_ERROR(backend_->Activate());
    const absl::Status status = CudaStatus(cudaGraphLaunch(exec_, backend_->stream()),
                                           "cudaGraphLaunch", __FILE__, __LINE__);
    if (!status.ok()) backend_->RecordError(status);
    return status;
  }

 private:
  CudaBackend* backend_;
  cudaGraphExec_t exec_;
};

}  // namespace

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    const bool no_driver =
        error == cudaErrorInsufficientDriver || error == cudaErrorInitializationError;
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device: ", no_driver ? "no usable CUDA driver (" : "",
                     cudaGetErrorString(error), no_driver ? ")" : ""));
  }
  return count;
}

absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(int device,
                                                        const CudaBackendOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend, CudaBackend::Create(device, options));
  return std::unique_ptr<Backend>(std::move(backend));
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    int device, const CudaBackendOptions& options) {
  if (device < 0) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", device, " is negative"));
  }
  ASSIGN_OR_RETURN(const int count, CudaDeviceCount());
  if (device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device ", device, " (this machine has ", count, ")"));
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend(device, options.tf32));
  RETURN_IF_ERROR(backend->Init(options.cudnn));
  return backend;
}

CudaBackend* CudaBackend::From(Backend* backend) { return dynamic_cast<CudaBackend*>(backend); }

absl::Status CudaBackend::Init(bool cudnn) {
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_));
  // cublasSetStream resets the workspace, so the workspace comes after it.
  CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, stream_));
  CUDA_RETURN_IF_ERROR(cudaMalloc(&cublas_workspace_, kCublasWorkspace));
  CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace));
  CUBLAS_RETURN_IF_ERROR(
      cublasSetMathMode(cublas_, tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  CUDA_RETURN_IF_ERROR(cudaMalloc(&bias_scratch_, cuda::kBiasScratchFloats * sizeof(float)));
  ASSIGN_OR_RETURN(lt_, LtDense::Create(cublas_workspace_, kCublasWorkspace));
#if defined(LOCKSTEP_HAVE_CUDNN)
  if (!cudnn) {
    cudnn_off_ = "turned off";
  } else if (absl::StatusOr<std::unique_ptr<CudnnConvs>> c = CudnnConvs::Create(stream_, tf32_);
             c.ok()) {
    cudnn_ = std::move(c).value();
    cudnn_off_.clear();
    // Fused attention shares cuDNN's fate: without a handle of its own, none.
    if (absl::StatusOr<std::unique_ptr<CudnnAttention>> a = CudnnAttention::Create(stream_);
        a.ok()) {
      sdpa_ = std::move(a).value();
    }
  } else {
    cudnn_off_ = std::string(c.status().message());
  }
#endif
  return absl::OkStatus();
}

bool CudaBackend::CudnnTakes(const ConvGeometry& g, std::string* why, bool bf16) {
#if defined(LOCKSTEP_HAVE_CUDNN)
  if (cudnn_ != nullptr) return cudnn_->Supports(g, bf16, why);
#endif
  if (why != nullptr) *why = cudnn_off_;
  return false;
}

absl::Status CudaBackend::SetTf32(bool enabled) {
  if (enabled == tf32_) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUBLAS_RETURN_IF_ERROR(
      cublasSetMathMode(cublas_, enabled ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  tf32_ = enabled;
#if defined(LOCKSTEP_HAVE_CUDNN)
  if (cudnn_ != nullptr) cudnn_->set_tf32(enabled);
#endif
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  if (cudaSetDevice(device_) != cudaSuccess) return;  // no device: nothing was created
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
#if defined(LOCKSTEP_HAVE_CUDNN)
  sdpa_.reset();
  cudnn_.reset();
#endif
  lt_.reset();
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (cublas_workspace_ != nullptr) cudaFree(cublas_workspace_);
  if (bias_scratch_ != nullptr) cudaFree(bias_scratch_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
}

std::string CudaBackend::Name() const { return absl::StrCat("cuda:", device_); }

// Sets the device only when it differs: the common case costs one cudaGetDevice.
absl::Status CudaBackend::Activate() {
  int current = -1;
  CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  if (current != device_) CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return absl::OkStatus();
}

void CudaBackend::RecordError(absl::Status status) {
  absl::Status& first = capturing_ ? capture_error_ : first_error_;
  if (first.ok()) first = std::move(status);
}

absl::StatusOr<Buffer> CudaBackend::Allocate(size_t bytes) {
  if (bytes == 0) return Buffer();
  RETURN_IF_ERROR(Activate());
  void* p = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  Buffer buffer(p, bytes, [](void* q) { cudaFree(q); });
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p, 0, bytes, stream_));
  return buffer;
}

absl::StatusOr<Buffer> CudaBackend::Upload(const void* host, size_t bytes) {
  ASSIGN_OR_RETURN(Buffer buffer, Allocate(bytes));
  RETURN_IF_ERROR(CopyToDevice(buffer.as<void>(), host, bytes));
  return buffer;
}

// From pageable memory, cudaMemcpyAsync returns once the driver has staged the source,
// so the caller may reuse it (see cuda_backend.h).
absl::Status CudaBackend::CopyToDevice(void* dst, const void* host, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_));
  return absl::OkStatus();
}

// Into pageable memory the copy returns only once done, so it would wait for all queued
// work without a bound; waiting in Synchronize() first keeps a watched wait bounded.
absl::Status CudaBackend::CopyToHost(void* host, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Synchronize());
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Synchronize() {
  if (!first_error_.ok()) return first_error_;
  RETURN_IF_ERROR(Activate());
  if (watch_) {
    RecordError(WaitWatched());
  } else {
    RecordError(
        CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", __FILE__, __LINE__));
  }
  return first_error_;
}

// Polls the stream, asking the watch between polls. Once the watch fails (and has, say,
// aborted a communicator), waits up to kDrainGrace for the stream to drain and returns
// the watch's error.
absl::Status CudaBackend::WaitWatched() {
  const absl::Time start = absl::Now();
  absl::Status watch_error;
  for (;;) {
    const cudaError_t error = cudaStreamQuery(stream_);
    if (error == cudaSuccess) return watch_error;
    if (error != cudaErrorNotReady) {
      const absl::Status status = CudaStatus(error, "cudaStreamQuery", __FILE__, __LINE__);
      return watch_error.ok() ? status : watch_error;
    }
    const absl::Duration waited = absl::Now() - start;
    if (watch_error.ok()) {
      watch_error = watch_(waited);
    } else if (waited > kDrainGrace) {
      return watch_error;
    }
    if (waited < kSpin) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

absl::Status CudaBackend::SetSyncWatch(SyncWatch watch) {
  if (watch && watch_) {
    return absl::FailedPreconditionError(Name() + ": another collective already watches it");
  }
  watch_ = std::move(watch);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend::Graph>> CudaBackend::Capture(
    const std::function<absl::Status()>& body) {
  if (!first_error_.ok()) return first_error_;
  RETURN_IF_ERROR(Activate());
  CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  capture_error_ = absl::OkStatus();
  const absl::Status body_status = body();
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  absl::Status status =
      CudaStatus(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture", __FILE__, __LINE__);
  // A launch that failed while capturing was recorded here, and invalidated the capture.
  if (!capture_error_.ok()) status = capture_error_;
  if (!body_status.ok()) status = body_status;
  if (!status.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    // Nothing captured ran: the backend stays usable (a sticky error would resurface).
    (void)cudaGetLastError();
    return status;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t error = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_RETURN_IF_ERROR(error);
  return std::make_unique<CudaGraph>(this, exec);
}

}  // namespace lockstep
