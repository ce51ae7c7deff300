// nn.Embed's lookup and its gradient (see Backend::Embed). Contract: embed.cuh.
#include "workers/cuda/embed.cuh"
#include "workers/cuda/launch.cuh"

namespace lockstep::cuda {
namespace {

__global__ void EmbedKernel(int n, int features, const float* ids, const float* table, float* out) {
  const size_t total = size_t(n) * features;
  for (size_t e = FirstIndex(); e < total; e += Stride()) {
    const size_t i = e / features;
    out[e] = table[static_cast<size_t>(ids[i]) * features + (e - i * features)];
  }
}

// Block-stride over the dy rows i: the block that holds a token's first occurrence owns
// its table row and writes it whole, each thread a column, adding the rows of that token
// in row order from 0 as the CPU backend does. Token ids are exact integers, so equal
// floats are equal ids. Rows of tokens that never occur keep the memset's zeros.
__global__ void EmbedBackwardKernel(int n, int features, const float* ids, const float* dy,
                                    float* dtable) {
  for (int i = blockIdx.x; i < n; i += gridDim.x) {
    const float id = ids[i];
    int earlier = 0;
    for (int j = threadIdx.x; j < i; j += blockDim.x) earlier |= ids[j] == id;
    // Block-uniform (i is), so every thread reaches the barrier and takes the same branch.
    if (__syncthreads_or(earlier)) continue;
    float* row = dtable + static_cast<size_t>(id) * features;
    for (int f = threadIdx.x; f < features; f += blockDim.x) {
      float sum = 0.0f;
      for (int j = i; j < n; ++j) {
        if (ids[j] == id) sum += dy[size_t(j) * features + f];
      }
      row[f] = sum;
    }
  }
}

}  // namespace

cudaError_t Embed(int n, int features, const float* ids, const float* table, float* out,
                  cudaStream_t stream) {
  const size_t total = size_t(n > 0 ? n : 0) * (features > 0 ? features : 0);
  if (total == 0) return cudaSuccess;
  EmbedKernel<<<Blocks(total), kThreads, 0, stream>>>(n, features, ids, table, out);
  return cudaGetLastError();
}

cudaError_t EmbedBackward(int n, int features, int num_embeddings, const float* ids,
                          const float* dy, float* dtable, cudaStream_t stream) {
  if (features <= 0 || num_embeddings <= 0) return cudaSuccess;
  const cudaError_t error =
      cudaMemsetAsync(dtable, 0, size_t(num_embeddings) * features * sizeof(float), stream);
  if (error != cudaSuccess || n <= 0) return error;
  const unsigned blocks = static_cast<unsigned>(n < int(kMaxBlocks) ? n : int(kMaxBlocks));
  EmbedBackwardKernel<<<blocks, kThreads, 0, stream>>>(n, features, ids, dy, dtable);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
