// BiasGrad's reduction order (bias_plan.h) on the host, no GPU needed: the plan fits the
// scratch and spreads narrow layers over many blocks, the order's result does not depend
// on which chunk is summed first or on which thread, and it is a column sum (close to the
// CPU backend's). cuda_backend_test checks the kernels against the same reference, bitwise.
#include "workers/cuda/bias_plan.h"

#include <algorithm>
#include <random>
#include <thread>

#include "workers/cpu/cpu_backend.h"
#include "workers/cuda/cuda_testing.h"

namespace lockstep::cuda {
namespace {

using testing::Bitwise;
using testing::RandomFloats;
using testing::RelativeL2;

constexpr std::pair<int, int> kShapes[] = {
    {1, 1},      {1, 33},      {128, 10},    {255, 3},          {257, 3},
    {4096, 512}, {12544, 70},  {25088, 64},  {100352, 32},      {802816, 32},
    {3, 300000}, {2000, 4097}, {1 << 20, 1}, {3, (1 << 20) + 5}};

TEST(BiasGradPlan, CoversTheRowsFitsTheScratchAndDependsOnTheShapeOnly) {
  for (const auto& [rows, cols] : kShapes) {
    const BiasGradPlan p = PlanBiasGrad(rows, cols);
    EXPECT_GE(p.chunks, 1);
    EXPECT_LE(p.chunks, kBiasMaxChunks);
    EXPECT_GE(int64_t{p.chunks} * p.chunk_rows, rows) << rows << "x" << cols;
    EXPECT_LT(int64_t{p.chunks - 1} * p.chunk_rows, rows) << "an empty chunk at " << rows;
    if (p.chunks > 1) {
      EXPECT_LE(size_t(p.chunks) * cols, kBiasScratchFloats) << rows << "x" << cols;
    }
    const BiasGradPlan again = PlanBiasGrad(rows, cols);
    EXPECT_EQ(again.chunks, p.chunks);
    EXPECT_EQ(again.chunk_rows, p.chunk_rows);
  }
  EXPECT_EQ(PlanBiasGrad(0, 5).chunks, 1);
}

// The first convolution's bias at batch 128 (100352 x 32) was one block on one SM: now
// it is hundreds of blocks, more than an H200 has SMs (132).
TEST(BiasGradPlan, SpreadsTheFirstConvolutionOverTheGpu) {
  for (const int batch : {128, 1024}) {
    const BiasGradPlan p = PlanBiasGrad(batch * 28 * 28, 32);
    EXPECT_GE(p.chunks, 264) << "batch " << batch;
  }
  EXPECT_EQ(PlanBiasGrad(128, 256).chunks, 1);  // a dense layer's rows are few: one pass
}

// Blocks run in any order, on any SM: each chunk's sum depends only on its rows, and
// pass 2 adds them in chunk order. Summing the chunks on 4 threads in a shuffled order
// gives the same bits as the reference.
TEST(BiasGradOrder, ChunksSummedInAnyOrderOnAnyThreadGiveTheSameBits) {
  for (const auto& [rows, cols] : {std::pair{100352, 32}, std::pair{25088, 64},
                                   std::pair{2000, 4097}, std::pair{1 << 20, 1}}) {
    const BiasGradPlan p = PlanBiasGrad(rows, cols);
    ASSERT_GT(p.chunks, 1) << rows << "x" << cols;
    const auto dy = RandomFloats(size_t(rows) * cols, rows ^ cols);
    std::vector<float> want(cols);
    BiasGradReference(rows, cols, dy.data(), want.data());

    std::vector<int> order(p.chunks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(cols));
    std::vector<float> partial(size_t(p.chunks) * cols);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (size_t i = t; i < order.size(); i += 4) {
          for (int col = cols - 1; col >= 0; --col) {  // columns backwards, too
            partial[size_t(order[i]) * cols + col] =
                ChunkColumnSumReference(rows, cols, p.chunk_rows, order[i], col, dy.data());
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    std::vector<float> got(cols);
    CombineChunksReference(p.chunks, cols, partial.data(), got.data());
    EXPECT_TRUE(Bitwise(got, want)) << rows << "x" << cols;
  }
}

TEST(BiasGradOrder, IsAColumnSumWithin1e5OfTheCpuBackend) {
  const std::unique_ptr<Backend> cpu = NewCpuBackend(1);
  for (const auto& [rows, cols] : kShapes) {
    if (size_t(rows) * cols > (size_t{1} << 23)) continue;  // quick on the host
    const auto dy = RandomFloats(size_t(rows) * cols, rows + 3 * cols);
    std::vector<float> want(cols), got(cols, 7.0f);
    EXPECT_OK(cpu->BiasGrad(rows, cols, dy.data(), want.data()));
    BiasGradReference(rows, cols, dy.data(), got.data());
    EXPECT_LE(RelativeL2(got, want), 1e-5) << rows << "x" << cols;
  }
  std::vector<float> zero(5, 7.0f);
  BiasGradReference(0, 5, nullptr, zero.data());
  EXPECT_EQ(zero, std::vector<float>(5, 0.0f));
}

}  // namespace
}  // namespace lockstep::cuda
