// Elementwise kernels: relu forward and backward, and pmean's division. Bitwise equal to
// the CPU backend (same float operations; nvcc's defaults keep IEEE division).
#ifndef LOCKSTEP_WORKERS_CUDA_ELEMENTWISE_CUH_
#define LOCKSTEP_WORKERS_CUDA_ELEMENTWISE_CUH_

#include <cuda_runtime.h>

#include <cstddef>

namespace lockstep::cuda {

// x = max(x, 0) in place.
cudaError_t Relu(size_t n, float* x, cudaStream_t stream);
// dy = y > 0 ? dy : 0 in place.
cudaError_t ReluBackward(size_t n, const float* y, float* dy, cudaStream_t stream);
// x /= d.
cudaError_t Divide(size_t n, float d, float* x, cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_ELEMENTWISE_CUH_
