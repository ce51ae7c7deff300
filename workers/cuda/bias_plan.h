// BiasGrad's reduction order, shared by its CUDA kernels (bias.cu) and their host
// reference below. The order is a fixed tree that depends on (rows, cols) only, never on
// the device or on scheduling: the kernels give the same bits on every run and every GPU,
// and the reference gives exactly the kernels' bits (nvcc's --fmad=false adds alike).
//
// Pass 1 splits the rows into `chunks` runs of `chunk_rows` (the last one may be shorter).
// One thread block sums one chunk of 32 columns: row lane l of kBiasLanes sums rows
// begin + l, begin + l + kBiasLanes, ... of its column, from 0.0f, then the block adds the
// lane sums in lane order, from 0.0f. With one chunk that is db. With more, the chunk sums
// (chunks x cols) go to a scratch buffer, and pass 2 reduces them as one chunk.
// Many chunks spread a narrow layer over the GPU: the CNN's first convolution at batch 128
// (100352 rows, 32 columns) is 392 blocks, not one.
//
// No CUDA in here: the host tests include it without a GPU.
#ifndef LOCKSTEP_WORKERS_CUDA_BIAS_PLAN_H_
#define LOCKSTEP_WORKERS_CUDA_BIAS_PLAN_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lockstep::cuda {

inline constexpr int kBiasColumns = 32;          // columns per block (threadIdx.x)
inline constexpr int kBiasLanes = 16;            // row lanes per block (threadIdx.y)
inline constexpr int kBiasMinChunkRows = 256;    // below this a chunk is not worth a block
inline constexpr int64_t kBiasMaxChunks = 1024;  // bounds pass 2's work per column
// The scratch the caller provides, in floats (4 MiB): chunks * cols never exceeds it.
inline constexpr size_t kBiasScratchFloats = size_t{1} << 20;

struct BiasGradPlan {
  int chunks = 1;      // >= 1
  int chunk_rows = 0;  // chunks * chunk_rows >= rows > (chunks - 1) * chunk_rows
};

inline BiasGradPlan PlanBiasGrad(int rows, int cols) {
  if (rows <= 0 || cols <= 0) return {1, kBiasMinChunkRows};
  const int64_t fit = std::max<int64_t>(1, static_cast<int64_t>(kBiasScratchFloats) / cols);
  const int64_t max_chunks = std::min(kBiasMaxChunks, fit);
  const int64_t chunk_rows =
      std::max<int64_t>(kBiasMinChunkRows, (rows + max_chunks - 1) / max_chunks);
  return {static_cast<int>((rows + chunk_rows - 1) / chunk_rows), static_cast<int>(chunk_rows)};
}

// What block (chunk, columns) computes, for one column: the host reference of the kernel.
inline float ChunkColumnSumReference(int rows, int cols, int chunk_rows, int chunk, int col,
                                     const float* in) {
  const int64_t begin = int64_t{chunk} * chunk_rows;
  const int64_t end = std::min<int64_t>(rows, begin + chunk_rows);
  float lanes[kBiasLanes];
  for (int lane = 0; lane < kBiasLanes; ++lane) {
    float sum = 0.0f;
    for (int64_t r = begin + lane; r < end; r += kBiasLanes) sum += in[r * cols + col];
    lanes[lane] = sum;
  }
  float total = 0.0f;
  for (float s : lanes) total += s;
  return total;
}

// Pass 1's chunk sums into out (chunks x cols), in any order of chunks: each is
// independent of the others.
inline void ChunkColumnSumsReference(int rows, int cols, const BiasGradPlan& plan, const float* in,
                                     float* out) {
  for (int c = 0; c < plan.chunks; ++c) {
    for (int col = 0; col < cols; ++col) {
      out[size_t(c) * cols + col] =
          ChunkColumnSumReference(rows, cols, plan.chunk_rows, c, col, in);
    }
  }
}

// Pass 2 (or the only pass): db (cols) from the chunk sums (chunks x cols).
inline void CombineChunksReference(int chunks, int cols, const float* partial, float* db) {
  for (int col = 0; col < cols; ++col) {
    db[col] = ChunkColumnSumReference(chunks, cols, chunks, 0, col, partial);
  }
}

// db (cols) = column sums of dy (rows, cols), bitwise as the CUDA kernels compute them.
inline void BiasGradReference(int rows, int cols, const float* dy, float* db) {
  const BiasGradPlan plan = PlanBiasGrad(rows, cols);
  if (plan.chunks == 1) {
    for (int col = 0; col < cols; ++col) {
      db[col] = ChunkColumnSumReference(rows, cols, plan.chunk_rows, 0, col, dy);
    }
    return;
  }
  std::vector<float> partial(size_t(plan.chunks) * cols);
  ChunkColumnSumsReference(rows, cols, plan, dy, partial.data());
  CombineChunksReference(plan.chunks, cols, partial.data(), db);
}

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_BIAS_PLAN_H_
