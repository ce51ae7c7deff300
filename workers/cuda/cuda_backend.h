// The CUDA backend: every Backend kernel on one device and one CUDA stream, GEMMs
// through cuBLAS, the rest as CUDA kernels that reproduce the CPU backend's arithmetic
// (workers/cpu), and CUDA graphs for Capture(). This header includes no CUDA header;
// a worker built without CUDA never sees it (see workers/backend_factory.h).
#ifndef LOCKSTEP_WORKERS_CUDA_CUDA_BACKEND_H_
#define LOCKSTEP_WORKERS_CUDA_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/backend.h"

namespace lockstep {

struct CudaBackendOptions {
  // GEMMs on TF32 tensor cores (CUBLAS_TF32_TENSOR_OP_MATH): faster, but results drift
  // from the CPU backend and from JAX by about 1e-3. Off: plain float32 (the default).
  bool tf32 = false;
  // Convolutions on cuDNN (deterministic float32 engines) where the build has cuDNN and it
  // loads at run time and takes the geometry; else, and when off, im2col + cuBLAS.
  bool cudnn = true;
};

// The number of CUDA devices. FAILED_PRECONDITION "no CUDA device: <CUDA's reason>" when
// there is no usable driver or device.
absl::StatusOr<int> CudaDeviceCount();

// A backend on CUDA device `device`. INVALID_ARGUMENT for a negative device;
// FAILED_PRECONDITION starting "no CUDA device" when there is no usable driver or no such
// device (what a GPU worker reports when it refuses to start); RESOURCE_EXHAUSTED or
// INTERNAL when the stream or cuBLAS cannot be set up.
//
// The backend is asynchronous: kernels are queued on its stream and the first launch or
// execution error is reported by Synchronize() (and by every later one: after an error
// the backend is unusable), except that a launch failing during Capture() fails only that
// capture. CopyToHost waits for the queued work first (and reports its
// error). Host memory passed to CopyToDevice/Upload may be reused once the call returns,
// provided it is ordinary (pageable) memory. Not thread-safe, but any one thread at a
// time may drive it (each call selects its device).
absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(int device,
                                                        const CudaBackendOptions& options = {});

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_CUDA_CUDA_BACKEND_H_
