// CudaBackend's kernels: cuBLAS for GEMMs, the launchers in *.cuh for the rest. Each
// call queues work on the backend's stream; a failed launch is recorded for Synchronize()
// and returned (outside a capture: there it fails the capture, see Failed).
#include <utility>

#include "absl/strings/str_cat.h"
#include "workers/cuda/attention_softmax.cuh"
#include "workers/cuda/backend_launch.h"
#include "workers/cuda/batch_norm.cuh"
#include "workers/cuda/bias.cuh"
#include "workers/cuda/conv.cuh"
#include "workers/cuda/cuda_backend_impl.h"
#include "workers/cuda/cuda_status.h"
#include "workers/cuda/dropout.cuh"
#include "workers/cuda/elementwise.cuh"
#include "workers/cuda/embed.cuh"
#include "workers/cuda/gather.cuh"
#include "workers/cuda/layer_norm.cuh"
#include "workers/cuda/optimizer.cuh"
#include "workers/cuda/pool.cuh"
#include "workers/cuda/softmax_xent.cuh"
#include "workers/cuda/tokens.cuh"

namespace lockstep {

absl::Status CudaBackend::Failed(absl::Status status) {
  RecordError(status);
  // While capturing, the capture fails instead (nothing captured has run): see Capture.
  return capturing_ ? absl::OkStatus() : status;
}

absl::Status CudaBackend::Check(cudaError_t error, const char* what, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  return Failed(CudaStatus(error, what, file, line));
}

absl::Status CudaBackend::Check(cublasStatus_t status, const char* what, const char* file,
                                int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return Failed(CublasStatus(status, what, file, line));
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets the
// operands swapped and n, m exchanged; leading dimensions are the row-major row lengths.
absl::Status CudaBackend::Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                               const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return absl::OkStatus();
  LS_LAUNCH(cublasSgemm(cublas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n,
                        m, k, &alpha, b, tb ? k : n, a, ta ? m : k, &beta, c, n));
}

// The same swap per product: cuBLAS's column-major view of a row-major matrix with
// leading dimension ld is its transpose with the same ld, and the strides carry over.
// The handle's math mode (SetTf32) applies to batched GEMMs as to Gemm.
absl::Status CudaBackend::GemmStrided(bool ta, bool tb, int m, int n, int k, float alpha,
                                      const float* a, int lda, int64_t stride_a, const float* b,
                                      int ldb, int64_t stride_b, float beta, float* c, int ldc,
                                      int64_t stride_c, int count) {
  if (m == 0 || n == 0 || count == 0) return absl::OkStatus();
  LS_LAUNCH(cublasSgemmStridedBatched(cublas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                      ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb,
                                      stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, count));
}

absl::Status CudaBackend::Im2Col(const ConvGeometry& g, const float* x, float* cols) {
  LS_LAUNCH(cuda::Im2Col(g, x, cols, stream_));
}

absl::Status CudaBackend::Col2Im(const ConvGeometry& g, const float* dcols, float* dx) {
  LS_LAUNCH(cuda::Col2Im(g, dcols, dx, stream_));
}

absl::Status CudaBackend::BiasAdd(int rows, int cols, const float* bias, float* y) {
  LS_LAUNCH(cuda::BiasAdd(rows, cols, bias, y, stream_));
}

absl::Status CudaBackend::BiasGrad(int rows, int cols, const float* dy, float* db) {
  LS_LAUNCH(cuda::BiasGrad(rows, cols, dy, db, bias_scratch_, stream_));
}

absl::Status CudaBackend::Relu(size_t n, float* x) { LS_LAUNCH(cuda::Relu(n, x, stream_)); }

absl::Status CudaBackend::ReluBackward(size_t n, const float* y, float* dy) {
  LS_LAUNCH(cuda::ReluBackward(n, y, dy, stream_));
}

absl::Status CudaBackend::Activate(Activation a, size_t n, const float* x, float* y) {
  LS_LAUNCH(cuda::Activate(a, n, x, y, stream_));
}

absl::Status CudaBackend::ActivateBackward(Activation a, size_t n, const float* x, float* dy) {
  LS_LAUNCH(cuda::ActivateBackward(a, n, x, dy, stream_));
}

absl::Status CudaBackend::AvgPool(const ConvGeometry& g, bool count_include_pad, const float* x,
                                  float* y) {
  LS_LAUNCH(cuda::AvgPool(g, count_include_pad, x, y, stream_));
}

absl::Status CudaBackend::AvgPoolBackward(const ConvGeometry& g, bool count_include_pad,
                                          const float* dy, float* dx) {
  LS_LAUNCH(cuda::AvgPoolBackward(g, count_include_pad, dy, dx, stream_));
}

absl::Status CudaBackend::MaxPool(const ConvGeometry& g, const float* x, float* y) {
  LS_LAUNCH(cuda::MaxPool(g, x, y, stream_));
}

absl::Status CudaBackend::MaxPoolBackward(const ConvGeometry& g, const float* x, const float* dy,
                                          float* dx) {
  LS_LAUNCH(cuda::MaxPoolBackward(g, x, dy, dx, stream_));
}

absl::Status CudaBackend::LayerNorm(int rows, int cols, float epsilon, const float* x,
                                    const float* scale, const float* bias, float* y, float* mean,
                                    float* rstd) {
  LS_LAUNCH(cuda::LayerNorm(rows, cols, epsilon, x, scale, bias, y, mean, rstd, stream_));
}

absl::Status CudaBackend::LayerNormBackward(int rows, int cols, const float* x, const float* scale,
                                            const float* mean, const float* rstd, const float* dy,
                                            float* dx, float* dscale, float* dbias) {
  LS_LAUNCH(
      cuda::LayerNormBackward(rows, cols, x, scale, mean, rstd, dy, dx, dscale, dbias, stream_));
}

absl::Status CudaBackend::BatchNormMoments(int rows, int cols, const float* x, float* partials,
                                           float* moments) {
  LS_LAUNCH(cuda::BatchNormMoments(rows, cols, x, partials, moments, stream_));
}

absl::Status CudaBackend::BatchNormVariance(int cols, const float* moments, float* var) {
  LS_LAUNCH(cuda::BatchNormVariance(cols, moments, var, stream_));
}

absl::Status CudaBackend::BatchNormApply(int rows, int cols, float epsilon, const float* x,
                                         const float* mean, const float* var, const float* scale,
                                         const float* bias, float* y) {
  LS_LAUNCH(cuda::BatchNormApply(rows, cols, epsilon, x, mean, var, scale, bias, y, stream_));
}

absl::Status CudaBackend::BatchNormUpdateStats(int cols, float momentum, float one_minus_momentum,
                                               const float* mean, const float* var, float* ra_mean,
                                               float* ra_var) {
  LS_LAUNCH(cuda::BatchNormUpdateStats(cols, momentum, one_minus_momentum, mean, var, ra_mean,
                                       ra_var, stream_));
}

absl::Status CudaBackend::BatchNormBackwardReduce(int rows, int cols, float epsilon, const float* x,
                                                  const float* dy, const float* mean,
                                                  const float* var, float* partials, float* sums,
                                                  float* dscale, float* dbias) {
  LS_LAUNCH(cuda::BatchNormBackwardReduce(rows, cols, epsilon, x, dy, mean, var, partials, sums,
                                          dscale, dbias, stream_));
}

absl::Status CudaBackend::BatchNormBackwardApply(int rows, int cols, float epsilon, int replicas,
                                                 const float* x, const float* dy,
                                                 const float* moments, const float* var,
                                                 const float* scale, const float* sums, float* dx) {
  LS_LAUNCH(cuda::BatchNormBackwardApply(rows, cols, epsilon, replicas, x, dy, moments, var, scale,
                                         sums, dx, stream_));
}

absl::Status CudaBackend::Dropout(size_t n, float keep, const rng::Key* key, rng::Impl impl,
                                  const float* x, float* y, uint8_t* mask) {
  LS_LAUNCH(cuda::Dropout(n, keep, key, impl, x, y, mask, stream_));
}

absl::Status CudaBackend::DropoutBackward(size_t n, float keep, const uint8_t* mask,
                                          const float* dy, float* dx) {
  LS_LAUNCH(cuda::DropoutBackward(n, keep, mask, dy, dx, stream_));
}

absl::Status CudaBackend::SoftmaxCrossEntropy(int b, int classes, const float* logits,
                                              const int32_t* labels, float* loss, float* dlogits,
                                              float* correct) {
  LS_LAUNCH(cuda::SoftmaxCrossEntropy(b, classes, logits, labels, loss, dlogits, correct, stream_));
}

absl::Status CudaBackend::GatherRows(size_t row, int n, const int32_t* idx, const float* table,
                                     float* out) {
  LS_LAUNCH(cuda::GatherRows(row, n, idx, table, out, stream_));
}

absl::Status CudaBackend::GatherLabels(int n, const int32_t* idx, const int32_t* table,
                                       int32_t* out) {
  LS_LAUNCH(cuda::GatherLabels(n, idx, table, out, stream_));
}

absl::Status CudaBackend::Copy(size_t n, const float* x, float* y) {
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Add(size_t n, const float* a, const float* b, float* y) {
  LS_LAUNCH(cuda::Add(n, a, b, y, stream_));
}

absl::Status CudaBackend::Embed(int n, int features, const float* ids, const float* table,
                                float* out) {
  LS_LAUNCH(cuda::Embed(n, features, ids, table, out, stream_));
}

absl::Status CudaBackend::EmbedBackward(int n, int features, int num_embeddings, const float* ids,
                                        const float* dy, float* dtable) {
  LS_LAUNCH(cuda::EmbedBackward(n, features, num_embeddings, ids, dy, dtable, stream_));
}

absl::Status CudaBackend::AddRows(int rows, int cols, const float* x, const float* bias, float* y) {
  LS_LAUNCH(cuda::AddRows(rows, cols, x, bias, y, stream_));
}

absl::Status CudaBackend::AttentionSoftmax(int rows, int t, bool causal, float* s) {
  LS_LAUNCH(cuda::AttentionSoftmax(rows, t, causal, s, stream_));
}

absl::Status CudaBackend::SoftmaxBackward(int rows, int cols, const float* p, float* dp) {
  LS_LAUNCH(cuda::SoftmaxBackward(rows, cols, p, dp, stream_));
}

absl::Status CudaBackend::MaskedScale(int rows, int cols, const uint8_t* mask, float scale,
                                      const float* x, float* y) {
  LS_LAUNCH(cuda::MaskedScale(rows, cols, mask, scale, x, y, stream_));
}

absl::Status CudaBackend::ClassToken(int b, int t, int f, const float* cls, const float* x,
                                     float* y) {
  LS_LAUNCH(cuda::ClassToken(b, t, f, cls, x, y, stream_));
}

absl::Status CudaBackend::ClassTokenBackward(int b, int t, int f, const float* dy, float* dx,
                                             float* dcls) {
  LS_LAUNCH(cuda::ClassTokenBackward(b, t, f, dy, dx, dcls, stream_));
}

absl::Status CudaBackend::SequencePool(bool mean, int b, int t, int f, const float* x, float* y) {
  LS_LAUNCH(cuda::SequencePool(mean, b, t, f, x, y, stream_));
}

absl::Status CudaBackend::SequencePoolBackward(bool mean, int b, int t, int f, const float* dy,
                                               float* dx) {
  LS_LAUNCH(cuda::SequencePoolBackward(mean, b, t, f, dy, dx, stream_));
}

absl::Status CudaBackend::Divide(size_t n, float d, float* x) {
  LS_LAUNCH(cuda::Divide(n, d, x, stream_));
}

absl::Status CudaBackend::SumSquares(size_t n, const float* x, double* partials, double* out) {
  LS_LAUNCH(cuda::SumSquares(n, x, partials, out, stream_));
}

absl::Status CudaBackend::ClipByGlobalNorm(size_t n, float max_norm, const double* sum_squares,
                                           float* x) {
  LS_LAUNCH(cuda::ClipByGlobalNorm(n, max_norm, sum_squares, x, stream_));
}

absl::Status CudaBackend::SgdUpdate(size_t n, const UpdateScalars* s, float momentum, bool nesterov,
                                    const float* g, float* trace, float* p) {
  LS_LAUNCH(cuda::SgdUpdate(n, s, momentum, nesterov, g, trace, p, stream_));
}

absl::Status CudaBackend::AdamUpdate(size_t n, const UpdateScalars* s, const float* g, float* mu,
                                     float* nu, float* p) {
  LS_LAUNCH(cuda::AdamUpdate(n, s, g, mu, nu, p, stream_));
}

}  // namespace lockstep
