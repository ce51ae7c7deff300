#include "workers/cuda/bias.cuh"
#include "workers/cuda/launch.cuh"

namespace lockstep::cuda {
namespace {

// BiasGrad's block: 32 columns by 32 row lanes.
constexpr int kLanes = 32;

__global__ void BiasAddKernel(int rows, int cols, const float* bias, float* y) {
  const size_t n = size_t(rows) * cols;
  for (size_t i = FirstIndex(); i < n; i += Stride()) y[i] += bias[i % cols];
}

// Block (32, kLanes) owns 32 columns. Lane ty sums rows ty, ty + kLanes, ... of its
// column (consecutive threads read consecutive columns: coalesced), then lane 0 adds
// the kLanes partial sums in lane order. The order depends only on rows, never on
// scheduling, so the result is the same on every run.
__global__ void BiasGradKernel(int rows, int cols, const float* dy, float* db) {
  __shared__ float partial[kLanes][32];
  const int col = blockIdx.x * 32 + threadIdx.x;
  float sum = 0.0f;
  if (col < cols) {
    for (int r = threadIdx.y; r < rows; r += kLanes) sum += dy[size_t(r) * cols + col];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int lane = 0; lane < kLanes; ++lane) total += partial[lane][threadIdx.x];
    db[col] = total;
  }
}

}  // namespace

cudaError_t BiasAdd(int rows, int cols, const float* bias, float* y, cudaStream_t stream) {
  const size_t n = size_t(rows) * cols;
  if (n == 0) return cudaSuccess;
  BiasAddKernel<<<Blocks(n), kThreads, 0, stream>>>(rows, cols, bias, y);
  return cudaGetLastError();
}

cudaError_t BiasGrad(int rows, int cols, const float* dy, float* db, cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  const dim3 block(32, kLanes);
  BiasGradKernel<<<(cols + 31) / 32, block, 0, stream>>>(rows, cols, dy, db);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
