// CudaBackend's bfloat16 kernels (mixed precision, docs/models.md#mixed-precision): the
// GEMMs on cuBLAS with bfloat16 operands and float32 products, sums and outputs
// (CUBLAS_COMPUTE_32F: the same products as the CPU's oneDNN bf16 matmuls, summed in
// another order), and the launchers of bf16.cuh and the bfloat16 variants beside their
// float32 kernels. The convolutions are Backend's im2col (Im2ColBf16) + GemmBf16.
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "workers/cuda/attention_softmax.cuh"
#include "workers/cuda/backend_launch.h"
#include "workers/cuda/bf16.cuh"
#include "workers/cuda/conv.cuh"
#include "workers/cuda/cuda_status.h"
#include "workers/cuda/pool.cuh"

namespace lockstep {

// cuBLAS's bfloat16 GEMMs with float32 accumulation need bfloat16 tensor cores (Ampere,
// compute capability 8.0, and later).
absl::Status CudaBackend::Bf16Support() {
  int major = 0;
  CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
  if (major >= 8) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("model.dtype: bfloat16 needs a GPU of compute capability 8.0 or later; CUDA ",
                   "device ", device_, " is ", major, ".x"));
}

absl::Status CudaBackend::ToBf16(size_t n, const float* x, Bf16* y) {
  LS_LAUNCH(cuda::ToBf16(n, x, y, stream_));
}

absl::Status CudaBackend::AddRowsBf16(int rows, int cols, const float* x, const float* bias,
                                      float* y, Bf16* y16) {
  LS_LAUNCH(cuda::AddRowsBf16(rows, cols, x, bias, y, y16, stream_));
}

// Row-major operands swapped as Gemm's (cuda_backend_ops.cc).
absl::Status CudaBackend::GemmBf16(bool ta, bool tb, int m, int n, int k, float alpha,
                                   const Bf16* a, const Bf16* b, float beta, float* c) {
  if (m == 0 || n == 0) return absl::OkStatus();
  LS_LAUNCH(cublasGemmEx(cublas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n,
                         m, k, &alpha, b, CUDA_R_16BF, tb ? k : n, a, CUDA_R_16BF, ta ? m : k,
                         &beta, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

absl::Status CudaBackend::GemmStridedBf16(bool ta, bool tb, int m, int n, int k, float alpha,
                                          const Bf16* a, int lda, int64_t stride_a, const Bf16* b,
                                          int ldb, int64_t stride_b, float beta, float* c, int ldc,
                                          int64_t stride_c, int count) {
  if (m == 0 || n == 0 || count == 0) return absl::OkStatus();
  LS_LAUNCH(cublasGemmStridedBatchedEx(
      cublas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
      CUDA_R_16BF, ldb, stride_b, a, CUDA_R_16BF, lda, stride_a, &beta, c, CUDA_R_32F, ldc,
      stride_c, count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

absl::Status CudaBackend::Im2ColBf16(const ConvGeometry& g, const Bf16* x, Bf16* cols) {
  LS_LAUNCH(cuda::Im2Col(g, x, cols, stream_));
}

absl::Status CudaBackend::ActivateBf16(Activation a, size_t n, const float* x, float* y,
                                       Bf16* y16) {
  LS_LAUNCH(cuda::ActivateBf16(a, n, x, y, y16, stream_));
}

absl::Status CudaBackend::ReluBf16(size_t n, float* x, Bf16* x16) {
  LS_LAUNCH(cuda::ReluBf16(n, x, x16, stream_));
}

absl::Status CudaBackend::AvgPoolBf16(const ConvGeometry& g, bool count_include_pad, const float* x,
                                      float* y) {
  LS_LAUNCH(cuda::AvgPoolBf16(g, count_include_pad, x, y, stream_));
}

absl::Status CudaBackend::AttentionSoftmaxBf16(int rows, int t, bool causal, float* s) {
  LS_LAUNCH(cuda::AttentionSoftmaxBf16(rows, t, causal, s, stream_));
}

}  // namespace lockstep
