// optax's updates over the flat parameter array: sgd (with momentum, optionally Nesterov's) and
// adam/adamw, and clip_by_global_norm's norm and scaling. Contract: optimizer.cuh.
#include "workers/cuda/launch.cuh"
#include "workers/cuda/optimizer.cuh"
#include "workers/cuda/update_math.cuh"

namespace lockstep::cuda {
namespace {

static_assert(kSumLanes == kThreads, "a chunk's lanes are one block's threads");

__global__ void SgdKernel(size_t n, const UpdateScalars* scalars, float momentum, bool nesterov,
                          const float* g, float* trace, float* p) {
  const float neg_lr = -scalars->lr;
  for (size_t i = FirstIndex(); i < n; i += Stride()) {
    SgdElement(i, g[i], neg_lr, momentum, nesterov, trace, p);
  }
}

__global__ void AdamKernel(size_t n, const UpdateScalars* scalars, const float* g, float* mu,
                           float* nu, float* p) {
  const UpdateScalars s = *scalars;
  for (size_t i = FirstIndex(); i < n; i += Stride()) AdamElement(i, g[i], s, mu, nu, p);
}

// One block per chunk of kSumChunk values (Backend::SumSquares's order): thread l is
// lane l, adding the chunk's values l, l + kSumLanes, ... in turn (squared for the first
// level); then the lanes pairwise in shared memory. A double square of a float is exact,
// so FMA or not, each addition rounds once, as on the CPU.
template <typename T, bool kSquare>
__global__ void ChunkSumKernel(size_t count, const T* x, double* out) {
  __shared__ double lane[kSumLanes];
  const size_t first = size_t{blockIdx.x} * kSumChunk;
  const size_t last = first + kSumChunk < count ? first + kSumChunk : count;
  double s = 0;
  for (size_t i = first + threadIdx.x; i < last; i += kSumLanes) {
    const double v = x[i];
    s = __dadd_rn(s, kSquare ? __dmul_rn(v, v) : v);
  }
  lane[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kSumLanes / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      lane[threadIdx.x] = __dadd_rn(lane[threadIdx.x], lane[threadIdx.x + stride]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = lane[0];
}

__global__ void ClipKernel(size_t n, float max_norm, const double* sum_squares, float* x) {
  const float norm = static_cast<float>(sqrt(*sum_squares));
  if (norm < max_norm) return;
  for (size_t i = FirstIndex(); i < n; i += Stride()) x[i] = __fmul_rn(x[i] / norm, max_norm);
}

}  // namespace

cudaError_t SgdUpdate(size_t n, const UpdateScalars* s, float momentum, bool nesterov,
                      const float* g, float* trace, float* p, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SgdKernel<<<Blocks(n), kThreads, 0, stream>>>(n, s, momentum, nesterov, g, trace, p);
  return cudaGetLastError();
}

cudaError_t AdamUpdate(size_t n, const UpdateScalars* s, const float* g, float* mu, float* nu,
                       float* p, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  AdamKernel<<<Blocks(n), kThreads, 0, stream>>>(n, s, g, mu, nu, p);
  return cudaGetLastError();
}

cudaError_t SumSquares(size_t n, const float* x, double* partials, double* out,
                       cudaStream_t stream) {
  const double* level = nullptr;
  for (size_t count = n;;) {
    const size_t chunks = count == 0 ? 1 : (count + kSumChunk - 1) / kSumChunk;
    double* dst = chunks == 1 ? out : partials;
    if (level == nullptr) {
      ChunkSumKernel<float, true>
          <<<static_cast<unsigned>(chunks), kSumLanes, 0, stream>>>(count, x, dst);
    } else {
      ChunkSumKernel<double, false>
          <<<static_cast<unsigned>(chunks), kSumLanes, 0, stream>>>(count, level, dst);
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess || chunks == 1) return err;
    level = partials;
    partials += chunks;
    count = chunks;
  }
}

cudaError_t ClipByGlobalNorm(size_t n, float max_norm, const double* sum_squares, float* x,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ClipKernel<<<Blocks(n), kThreads, 0, stream>>>(n, max_norm, sum_squares, x);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
