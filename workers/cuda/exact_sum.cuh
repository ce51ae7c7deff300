// core/exact_sum.h's float <-> int64 fixed-point conversions on the device (the Backend's
// ExactBlockExponents, ExactToFixed and ExactFromFixed, whose host defaults are their CPU
// references): the same exponents, the same integers (round to nearest, ties to even) and
// the same conversions back, bit for bit.
#ifndef LOCKSTEP_WORKERS_CUDA_EXACT_SUM_CUH_
#define LOCKSTEP_WORKERS_CUDA_EXACT_SUM_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace lockstep::cuda {

// exponents[b] = ExactSum::BlockExponent of x's block b (max with exponents[b] when
// accumulate).
cudaError_t ExactBlockExponents(size_t n, size_t block, const float* x, bool accumulate,
                                int64_t* exponents, cudaStream_t stream);
// fixed[i] (+)= round(x[i] * 2^(62 - headroom - exponents[i / block])), 0 in unscaled blocks.
cudaError_t ExactToFixed(size_t n, size_t block, int headroom, const int64_t* exponents,
                         const float* x, bool accumulate, int64_t* fixed, cudaStream_t stream);
// out[i] = float(double(float(fixed[i])) * 2^(e + headroom - 62)); +0 or NaN where unscaled.
cudaError_t ExactFromFixed(size_t n, size_t block, int headroom, const int64_t* exponents,
                           const int64_t* fixed, float* out, cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_EXACT_SUM_CUH_
