// Average and max pooling on NHWC activations, any window, strides and padding (see
// Backend::AvgPool and MaxPool), and their backward passes. Bitwise equal to the CPU
// backend: the same window arithmetic (core/layer_math.h), each window's elements summed
// or compared in row-major order, and the backward passes as gathers that add each
// window's share in output order, one thread per input element (no atomics).
#ifndef LOCKSTEP_WORKERS_CUDA_POOL_CUH_
#define LOCKSTEP_WORKERS_CUDA_POOL_CUH_

#include <cuda_runtime.h>

#include "core/backend.h"

namespace lockstep::cuda {

// y (b, oh, ow, c) from x (b, h, w, c); g.f == g.c.
cudaError_t AvgPool(const ConvGeometry& g, bool count_include_pad, const float* x, float* y,
                    cudaStream_t stream);
// dx (b, h, w, c), overwritten.
cudaError_t AvgPoolBackward(const ConvGeometry& g, bool count_include_pad, const float* dy,
                            float* dx, cudaStream_t stream);
// nn.avg_pool in bfloat16 (Backend::AvgPoolBf16): bitwise the CPU backend's, the window
// summed in bfloat16 in XLA's order (cpu_bf16.cc).
cudaError_t AvgPoolBf16(const ConvGeometry& g, bool count_include_pad, const float* x, float* y,
                        cudaStream_t stream);
cudaError_t MaxPool(const ConvGeometry& g, const float* x, float* y, cudaStream_t stream);
// dx (b, h, w, c), overwritten: each window's dy to its first maximum.
cudaError_t MaxPoolBackward(const ConvGeometry& g, const float* x, const float* dy, float* dx,
                            cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_POOL_CUH_
