// The batch gather: a step's samples and labels, picked by index from a dataset resident in device
// memory. Contract: gather.cuh.
#include "workers/cuda/gather.cuh"
#include "workers/cuda/launch.cuh"

namespace lockstep::cuda {
namespace {

__global__ void GatherRowsKernel(size_t row, int n, const int32_t* idx, const float* table,
                                 float* out) {
  const size_t total = row * n;
  for (size_t e = FirstIndex(); e < total; e += Stride()) {
    const size_t i = e / row;
    out[e] = table[size_t(idx[i]) * row + (e - i * row)];
  }
}

__global__ void GatherLabelsKernel(int n, const int32_t* idx, const int32_t* table, int32_t* out) {
  for (size_t i = FirstIndex(); i < size_t(n); i += Stride()) out[i] = table[idx[i]];
}

}  // namespace

cudaError_t GatherRows(size_t row, int n, const int32_t* idx, const float* table, float* out,
                       cudaStream_t stream) {
  const size_t total = row * (n > 0 ? n : 0);
  if (total == 0) return cudaSuccess;
  GatherRowsKernel<<<Blocks(total), kThreads, 0, stream>>>(row, n, idx, table, out);
  return cudaGetLastError();
}

cudaError_t GatherLabels(int n, const int32_t* idx, const int32_t* table, int32_t* out,
                         cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  GatherLabelsKernel<<<Blocks(n), kThreads, 0, stream>>>(n, idx, table, out);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
