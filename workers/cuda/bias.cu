// Bias forward and backward over row-major (rows, cols) activations. Contract: bias.cuh.
#include "workers/cuda/bias.cuh"
#include "workers/cuda/bias_plan.h"
#include "workers/cuda/launch.cuh"

namespace lockstep::cuda {
namespace {

__global__ void BiasAddKernel(int rows, int cols, const float* bias, float* y) {
  const size_t n = size_t(rows) * cols;
  for (size_t i = FirstIndex(); i < n; i += Stride()) y[i] += bias[i % cols];
}

__global__ void AddRowsKernel(int rows, int cols, const float* x, const float* bias, float* y) {
  const size_t n = size_t(rows) * cols;
  for (size_t i = FirstIndex(); i < n; i += Stride()) y[i] = x[i] + bias[i % cols];
}

// Block (kBiasColumns, kBiasLanes) sums chunk blockIdx.y of columns blockIdx.x * 32 ...:
// out[chunk][col] = the lane sums (lane ty: rows begin + ty, + kBiasLanes, ...; consecutive
// threads read consecutive columns: coalesced) added in lane order. The order is
// bias_plan.h's, which ChunkColumnSumReference reproduces on the host.
__global__ void ChunkColumnSumsKernel(int rows, int cols, int chunk_rows, const float* in,
                                      float* out) {
  __shared__ float partial[kBiasLanes][kBiasColumns];
  const int col = blockIdx.x * kBiasColumns + threadIdx.x;
  const int64_t begin = int64_t{blockIdx.y} * chunk_rows;
  const int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : int64_t{rows};
  float sum = 0.0f;
  if (col < cols) {
    // Unrolled loads stay in flight together; the adds keep their order.
#pragma unroll 4
    for (int64_t r = begin + threadIdx.y; r < end; r += kBiasLanes) sum += in[r * cols + col];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int lane = 0; lane < kBiasLanes; ++lane) total += partial[lane][threadIdx.x];
    out[size_t{blockIdx.y} * cols + col] = total;
  }
}

}  // namespace

cudaError_t BiasAdd(int rows, int cols, const float* bias, float* y, cudaStream_t stream) {
  const size_t n = size_t(rows) * cols;
  if (n == 0) return cudaSuccess;
  BiasAddKernel<<<Blocks(n), kThreads, 0, stream>>>(rows, cols, bias, y);
  return cudaGetLastError();
}

cudaError_t AddRows(int rows, int cols, const float* x, const float* bias, float* y,
                    cudaStream_t stream) {
  const size_t n = size_t(rows > 0 ? rows : 0) * (cols > 0 ? cols : 0);
  if (n == 0) return cudaSuccess;
  AddRowsKernel<<<Blocks(n), kThreads, 0, stream>>>(rows, cols, x, bias, y);
  return cudaGetLastError();
}

cudaError_t BiasGrad(int rows, int cols, const float* dy, float* db, float* scratch,
                     cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  const BiasGradPlan plan = PlanBiasGrad(rows, cols);
  const dim3 block(kBiasColumns, kBiasLanes);
  const unsigned col_blocks = (unsigned(cols) + kBiasColumns - 1) / kBiasColumns;
  if (plan.chunks == 1) {
    ChunkColumnSumsKernel<<<col_blocks, block, 0, stream>>>(rows, cols, plan.chunk_rows, dy, db);
    return cudaGetLastError();
  }
  ChunkColumnSumsKernel<<<dim3(col_blocks, plan.chunks), block, 0, stream>>>(
      rows, cols, plan.chunk_rows, dy, scratch);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return error;
  ChunkColumnSumsKernel<<<col_blocks, block, 0, stream>>>(plan.chunks, cols, plan.chunks, scratch,
                                                          db);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
