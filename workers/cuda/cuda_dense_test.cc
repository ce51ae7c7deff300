// The dense layers' cuBLASLt GEMM with its bias and ReLU epilogue (Backend::DenseForward,
// cublaslt_dense.h) against the CPU backend's Gemm + BiasAdd + Relu (within 1e-6,
// relative L2: another summation order) and against the same GPU's cuBLAS Gemm + BiasAdd
// + Relu, with and without a bias and a ReLU, at the shapes the examples use (the MLP's,
// the CNN's head, a transformer's projections and MLP at a row count no tile divides);
// every result the same bits when run again and when replayed from a captured graph.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "workers/cuda/cuda_testing.h"

namespace lockstep {
namespace {

using testing::Bitwise;
using testing::CudaTest;
using testing::RandomFloats;
using testing::RelativeL2;

struct Shape {
  int rows, out, in;
};

using CudaDenseTest = CudaTest;

TEST_F(CudaDenseTest, EpilogueMatchesGemmBiasAddAndRelu) {
  for (const Shape s : {Shape{128, 512, 784}, Shape{128, 10, 3136}, Shape{4096, 512, 512},
                        Shape{1000, 384, 128}, Shape{999, 512, 128}, Shape{1, 7, 5}}) {
    const auto x = RandomFloats(size_t(s.rows) * s.in, 1),
               w = RandomFloats(size_t(s.in) * s.out, 2), bias = RandomFloats(s.out, 3);
    Buffer dx = ToDevice(x), dw = ToDevice(w), db = ToDevice(bias);
    const size_t n = size_t(s.rows) * s.out;
    for (const bool with_bias : {true, false}) {
      for (const bool relu : {false, true}) {
        const std::string what = absl::StrCat(s.rows, " x ", s.in, " -> ", s.out,
                                              with_bias ? ", a bias" : "", relu ? ", a ReLU" : "");
        std::vector<float> cpu(n);
        ASSERT_OK(cpu_->DenseForward(s.rows, s.out, s.in, x.data(), w.data(),
                                     with_bias ? bias.data() : nullptr, relu, cpu.data()));
        ASSERT_OK_AND_ASSIGN(Buffer fused, cuda_->Allocate(n * sizeof(float)));
        ASSERT_OK_AND_ASSIGN(Buffer again, cuda_->Allocate(n * sizeof(float)));
        ASSERT_OK_AND_ASSIGN(Buffer unfused, cuda_->Allocate(n * sizeof(float)));
        const float* b = with_bias ? db.as() : nullptr;
        ASSERT_OK(cuda_->DenseForward(s.rows, s.out, s.in, dx.as(), dw.as(), b, relu, fused.as()));
        ASSERT_OK(cuda_->DenseForward(s.rows, s.out, s.in, dx.as(), dw.as(), b, relu, again.as()));
        ASSERT_OK(cuda_->Gemm(false, false, s.rows, s.out, s.in, 1.0f, dx.as(), dw.as(), 0.0f,
                              unfused.as()));
        if (with_bias) ASSERT_OK(cuda_->BiasAdd(s.rows, s.out, b, unfused.as()));
        if (relu) ASSERT_OK(cuda_->Relu(n, unfused.as()));
        const auto f = ToHost(fused, n);
        EXPECT_LE(RelativeL2(f, cpu), 1e-6) << what << " vs the CPU";
        EXPECT_LE(RelativeL2(f, ToHost(unfused, n)), 1e-6) << what << " vs cuBLAS's kernels";
        EXPECT_TRUE(Bitwise(f, ToHost(again, n))) << what << ": not the same bits again";
      }
    }
  }
}

TEST_F(CudaDenseTest, ReplayedFromAGraphGivesTheEagerBits) {
  const Shape s{256, 384, 128};
  const size_t n = size_t(s.rows) * s.out;
  Buffer dx = ToDevice(RandomFloats(size_t(s.rows) * s.in, 4)),
         dw = ToDevice(RandomFloats(size_t(s.in) * s.out, 5)),
         db = ToDevice(RandomFloats(s.out, 6));
  ASSERT_OK_AND_ASSIGN(Buffer eager, cuda_->Allocate(n * sizeof(float)));
  ASSERT_OK_AND_ASSIGN(Buffer replayed, cuda_->Allocate(n * sizeof(float)));
  ASSERT_OK_AND_ASSIGN(auto graph, cuda_->Capture([&] {
    return cuda_->DenseForward(s.rows, s.out, s.in, dx.as(), dw.as(), db.as(), true, replayed.as());
  }));
  ASSERT_OK(graph->Launch());
  ASSERT_OK(cuda_->DenseForward(s.rows, s.out, s.in, dx.as(), dw.as(), db.as(), true, eager.as()));
  EXPECT_TRUE(Bitwise(ToHost(replayed, n), ToHost(eager, n)));
}

}  // namespace
}  // namespace lockstep
