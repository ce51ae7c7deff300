// Launch geometry shared by the kernels: 256-thread blocks, a capped grid, and
// grid-stride loops over 64-bit indices, so any n runs with one launch.
#ifndef LOCKSTEP_WORKERS_CUDA_LAUNCH_CUH_
#define LOCKSTEP_WORKERS_CUDA_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace lockstep::cuda {

inline constexpr int kThreads = 256;
// Grid cap: enough blocks to fill any current GPU; larger n loop (grid-stride).
inline constexpr size_t kMaxBlocks = 4096;

inline unsigned Blocks(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// Grid-stride loops: for (size_t i = FirstIndex(); i < n; i += Stride()).
__device__ inline size_t FirstIndex() { return size_t{blockIdx.x} * blockDim.x + threadIdx.x; }
__device__ inline size_t Stride() { return size_t{gridDim.x} * blockDim.x; }

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_LAUNCH_CUH_
