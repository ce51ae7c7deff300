// The elementwise bfloat16 kernels of mixed precision (see Backend's ToBf16, AddRowsBf16,
// ActivateBf16 and ReluBf16): the CPU backend's (workers/cpu/cpu_bf16.cc) on the device,
// the same rounding (core/bfloat16.h, round to nearest even) at the same places and the
// same formulas (core/layer_math.h). ToBf16, AddRowsBf16 and ReluBf16 are bitwise equal to
// the CPU's; ActivateBf16 differs only where CUDA's expf, tanhf or erfcf differ from
// glibc's (a few ulps of float32) by enough to round to another bfloat16.
#ifndef LOCKSTEP_WORKERS_CUDA_BF16_CUH_
#define LOCKSTEP_WORKERS_CUDA_BF16_CUH_

#include <cuda_runtime.h>

#include <cstddef>

#include "core/backend.h"

namespace lockstep::cuda {

// y = bf16(x).
cudaError_t ToBf16(size_t n, const float* x, Bf16* y, cudaStream_t stream);
// y = x as float32 (exact).
cudaError_t FromBf16(size_t n, const Bf16* x, float* y, cudaStream_t stream);
// y (rows, cols) = bf16(bf16(x) + bf16(bias[c])), or bf16(x) without a bias; y may be x;
// y16 (unless null) = y as Bf16.
cudaError_t AddRowsBf16(int rows, int cols, const float* x, const float* bias, float* y, Bf16* y16,
                        cudaStream_t stream);
// y = math::ActivateBf16(a, x); y may be x; y16 (unless null) = y as Bf16.
cudaError_t ActivateBf16(Activation a, size_t n, const float* x, float* y, Bf16* y16,
                         cudaStream_t stream);
// x = max(x, 0) in place and x16 = x as Bf16.
cudaError_t ReluBf16(size_t n, float* x, Bf16* x16, cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_BF16_CUH_
