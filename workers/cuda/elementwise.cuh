// Elementwise kernels: relu and the other activations, forward and backward, and pmean's
// division. Relu and the division are bitwise equal to the CPU backend (same float
// operations; nvcc's defaults keep IEEE division); the other activations compute the same
// expressions (core/layer_math.h) with CUDA's tanhf, expf and erfcf, a few ulps from
// glibc's.
#ifndef LOCKSTEP_WORKERS_CUDA_ELEMENTWISE_CUH_
#define LOCKSTEP_WORKERS_CUDA_ELEMENTWISE_CUH_

#include <cuda_runtime.h>

#include <cstddef>

#include "core/backend.h"

namespace lockstep::cuda {

// x = max(x, 0) in place.
cudaError_t Relu(size_t n, float* x, cudaStream_t stream);
// dy = y > 0 ? dy : 0 in place.
cudaError_t ReluBackward(size_t n, const float* y, float* dy, cudaStream_t stream);
// y = a(x).
cudaError_t Activate(Activation a, size_t n, const float* x, float* y, cudaStream_t stream);
// dy *= a'(x) in place.
cudaError_t ActivateBackward(Activation a, size_t n, const float* x, float* dy,
                             cudaStream_t stream);
// x /= d.
cudaError_t Divide(size_t n, float d, float* x, cudaStream_t stream);
// y = a + b (y may be a or b): bitwise the CPU backend's (one float add).
cudaError_t Add(size_t n, const float* a, const float* b, float* y, cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_ELEMENTWISE_CUH_
