// The exact sum's float <-> int64 fixed-point conversions on the device.
// Contract: exact_sum.cuh.
#include "core/exact_sum.h"
#include "workers/cuda/exact_sum.cuh"
#include "workers/cuda/launch.cuh"

namespace lockstep::cuda {
namespace {

constexpr int64_t kZeroBlock = ExactSum::kZeroBlock;
constexpr int64_t kNonFinite = ExactSum::kNonFinite;

__device__ bool Unscaled(int64_t e) { return e == kZeroBlock || e == kNonFinite; }

// frexp's exponent of the float whose magnitude has the bits m (finite, nonzero): the e
// with m's value in [2^(e-1), 2^e). Normal: the biased exponent - 126; subnormal
// (mantissa * 2^-149): the mantissa's bit length - 149.
__device__ int64_t FrexpExponent(int32_t m) {
  const int biased = m >> 23;
  return biased > 0 ? biased - 126 : (32 - __clz(m)) - 149;
}

// One thread block per exact-sum block: the largest |x| as bits (non-negative int32s order
// as the floats do, inf and NaN above every finite one), then its exponent.
__global__ void BlockExponentKernel(size_t n, size_t block, const float* x, bool accumulate,
                                    int64_t* exponents) {
  __shared__ int32_t lane[kThreads];
  const size_t first = size_t{blockIdx.x} * block;
  const size_t last = first + block < n ? first + block : n;
  int32_t largest = 0;
  for (size_t i = first + threadIdx.x; i < last; i += kThreads) {
    largest = max(largest, __float_as_int(x[i]) & 0x7fffffff);
  }
  lane[threadIdx.x] = largest;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      lane[threadIdx.x] = max(lane[threadIdx.x], lane[threadIdx.x + stride]);
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  const int32_t m = lane[0];
  const int64_t e = m >= 0x7f800000 ? kNonFinite : m == 0 ? kZeroBlock : FrexpExponent(m);
  exponents[blockIdx.x] = accumulate ? max(exponents[blockIdx.x], e) : e;
}

// 2^k as a double, exactly, for the k an exact sum uses (|k| < 1023).
__device__ double Pow2(int64_t k) { return __longlong_as_double((k + 1023) << 52); }

__global__ void ToFixedKernel(size_t n, size_t block, int headroom, const int64_t* exponents,
                              const float* x, bool accumulate, int64_t* fixed) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) {
    const int64_t e = exponents[i / block];
    // x * 2^s is exact in double; the conversion rounds to nearest, ties to even, as the
    // host's (SSE2's cvtsd2si, llrint) does.
    const int64_t v =
        Unscaled(e) ? 0
                    : __double2ll_rn(__dmul_rn(static_cast<double>(x[i]), Pow2(62 - headroom - e)));
    fixed[i] = accumulate ? fixed[i] + v : v;
  }
}

__global__ void FromFixedKernel(size_t n, size_t block, int headroom, const int64_t* exponents,
                                const int64_t* fixed, float* out) {
  for (size_t i = FirstIndex(); i < n; i += Stride()) {
    const int64_t e = exponents[i / block];
    if (Unscaled(e)) {
      out[i] = e == kZeroBlock ? 0.0f : __int_as_float(0x7fc00000);
      continue;
    }
    const double total = static_cast<double>(__ll2float_rn(fixed[i]));
    out[i] = __double2float_rn(__dmul_rn(total, Pow2(e + headroom - 62)));
  }
}

}  // namespace

cudaError_t ExactBlockExponents(size_t n, size_t block, const float* x, bool accumulate,
                                int64_t* exponents, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const size_t blocks = (n + block - 1) / block;
  BlockExponentKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      n, block, x, accumulate, exponents);
  return cudaGetLastError();
}

cudaError_t ExactToFixed(size_t n, size_t block, int headroom, const int64_t* exponents,
                         const float* x, bool accumulate, int64_t* fixed, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ToFixedKernel<<<Blocks(n), kThreads, 0, stream>>>(n, block, headroom, exponents, x, accumulate,
                                                    fixed);
  return cudaGetLastError();
}

cudaError_t ExactFromFixed(size_t n, size_t block, int headroom, const int64_t* exponents,
                           const int64_t* fixed, float* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FromFixedKernel<<<Blocks(n), kThreads, 0, stream>>>(n, block, headroom, exponents, fixed, out);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
