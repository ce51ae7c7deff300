// CudaBackend's kernels: cuBLAS for GEMMs, the launchers in *.cuh for the rest. Each
// call queues work on the backend's stream and records a failed launch for
// Synchronize() (Backend's kernel methods return nothing).
#include "absl/strings/str_cat.h"
#include "workers/cuda/batch_norm.cuh"
#include "workers/cuda/bias.cuh"
#include "workers/cuda/conv.cuh"
#include "workers/cuda/cuda_backend_impl.h"
#include "workers/cuda/cuda_status.h"
#include "workers/cuda/dropout.cuh"
#include "workers/cuda/elementwise.cuh"
#include "workers/cuda/gather.cuh"
#include "workers/cuda/layer_norm.cuh"
#include "workers/cuda/optimizer.cuh"
#include "workers/cuda/pool.cuh"
#include "workers/cuda/softmax_xent.cuh"

// Selects the device, runs the launcher `expr` and records its error with file:line.
#define LS_LAUNCH(expr)                         \
  do {                                          \
    const absl::Status ls_active_ = Activate(); \
    if (!ls_active_.ok()) {                     \
      RecordError(ls_active_);                  \
    } else {                                    \
      Check((expr), #expr, __FILE__, __LINE__); \
    }                                           \
  } while (0)

namespace lockstep {

void CudaBackend::Check(cudaError_t error, const char* what, const char* file, int line) {
  if (error != cudaSuccess) RecordError(CudaStatus(error, what, file, line));
}

void CudaBackend::Check(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) RecordError(CublasStatus(status, what, file, line));
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets the
// operands swapped and n, m exchanged; leading dimensions are the row-major row lengths.
void CudaBackend::Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                       const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
  LS_LAUNCH(cublasSgemm(cublas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n,
                        m, k, &alpha, b, tb ? k : n, a, ta ? m : k, &beta, c, n));
}

void CudaBackend::Im2Col(const ConvGeometry& g, const float* x, float* cols) {
  LS_LAUNCH(cuda::Im2Col(g, x, cols, stream_));
}

void CudaBackend::Col2Im(const ConvGeometry& g, const float* dcols, float* dx) {
  LS_LAUNCH(cuda::Col2Im(g, dcols, dx, stream_));
}

void CudaBackend::BiasAdd(int rows, int cols, const float* bias, float* y) {
  LS_LAUNCH(cuda::BiasAdd(rows, cols, bias, y, stream_));
}

void CudaBackend::BiasGrad(int rows, int cols, const float* dy, float* db) {
  LS_LAUNCH(cuda::BiasGrad(rows, cols, dy, db, bias_scratch_, stream_));
}

void CudaBackend::Relu(size_t n, float* x) { LS_LAUNCH(cuda::Relu(n, x, stream_)); }

void CudaBackend::ReluBackward(size_t n, const float* y, float* dy) {
  LS_LAUNCH(cuda::ReluBackward(n, y, dy, stream_));
}

void CudaBackend::Activate(Activation a, size_t n, const float* x, float* y) {
  LS_LAUNCH(cuda::Activate(a, n, x, y, stream_));
}

void CudaBackend::ActivateBackward(Activation a, size_t n, const float* x, float* dy) {
  LS_LAUNCH(cuda::ActivateBackward(a, n, x, dy, stream_));
}

void CudaBackend::AvgPool(const ConvGeometry& g, bool count_include_pad, const float* x, float* y) {
  LS_LAUNCH(cuda::AvgPool(g, count_include_pad, x, y, stream_));
}

void CudaBackend::AvgPoolBackward(const ConvGeometry& g, bool count_include_pad, const float* dy,
                                  float* dx) {
  LS_LAUNCH(cuda::AvgPoolBackward(g, count_include_pad, dy, dx, stream_));
}

void CudaBackend::MaxPool(const ConvGeometry& g, const float* x, float* y) {
  LS_LAUNCH(cuda::MaxPool(g, x, y, stream_));
}

void CudaBackend::MaxPoolBackward(const ConvGeometry& g, const float* x, const float* dy,
                                  float* dx) {
  LS_LAUNCH(cuda::MaxPoolBackward(g, x, dy, dx, stream_));
}

void CudaBackend::LayerNorm(int rows, int cols, float epsilon, const float* x, const float* scale,
                            const float* bias, float* y, float* mean, float* rstd) {
  LS_LAUNCH(cuda::LayerNorm(rows, cols, epsilon, x, scale, bias, y, mean, rstd, stream_));
}

void CudaBackend::LayerNormBackward(int rows, int cols, const float* x, const float* scale,
                                    const float* mean, const float* rstd, const float* dy,
                                    float* dx, float* dscale, float* dbias) {
  LS_LAUNCH(
      cuda::LayerNormBackward(rows, cols, x, scale, mean, rstd, dy, dx, dscale, dbias, stream_));
}

void CudaBackend::BatchNormMoments(int rows, int cols, const float* x, float* partials,
                                   float* moments) {
  LS_LAUNCH(cuda::BatchNormMoments(rows, cols, x, partials, moments, stream_));
}

void CudaBackend::BatchNormVariance(int cols, const float* moments, float* var) {
  LS_LAUNCH(cuda::BatchNormVariance(cols, moments, var, stream_));
}

void CudaBackend::BatchNormApply(int rows, int cols, float epsilon, const float* x,
                                 const float* mean, const float* var, const float* scale,
                                 const float* bias, float* y) {
  LS_LAUNCH(cuda::BatchNormApply(rows, cols, epsilon, x, mean, var, scale, bias, y, stream_));
}

void CudaBackend::BatchNormUpdateStats(int cols, float momentum, float one_minus_momentum,
                                       const float* mean, const float* var, float* ra_mean,
                                       float* ra_var) {
  LS_LAUNCH(cuda::BatchNormUpdateStats(cols, momentum, one_minus_momentum, mean, var, ra_mean,
                                       ra_var, stream_));
}

void CudaBackend::BatchNormBackwardReduce(int rows, int cols, float epsilon, const float* x,
                                          const float* dy, const float* mean, const float* var,
                                          float* partials, float* sums, float* dscale,
                                          float* dbias) {
  LS_LAUNCH(cuda::BatchNormBackwardReduce(rows, cols, epsilon, x, dy, mean, var, partials, sums,
                                          dscale, dbias, stream_));
}

void CudaBackend::BatchNormBackwardApply(int rows, int cols, float epsilon, int replicas,
                                         const float* x, const float* dy, const float* moments,
                                         const float* var, const float* scale, const float* sums,
                                         float* dx) {
  LS_LAUNCH(cuda::BatchNormBackwardApply(rows, cols, epsilon, replicas, x, dy, moments, var, scale,
                                         sums, dx, stream_));
}

void CudaBackend::Dropout(size_t n, float keep, const rng::Key* key, rng::Impl impl, const float* x,
                          float* y, uint8_t* mask) {
  LS_LAUNCH(cuda::Dropout(n, keep, key, impl, x, y, mask, stream_));
}

void CudaBackend::DropoutBackward(size_t n, float keep, const uint8_t* mask, const float* dy,
                                  float* dx) {
  LS_LAUNCH(cuda::DropoutBackward(n, keep, mask, dy, dx, stream_));
}

void CudaBackend::SoftmaxCrossEntropy(int b, int classes, const float* logits,
                                      const int32_t* labels, float* loss, float* dlogits,
                                      float* correct) {
  LS_LAUNCH(cuda::SoftmaxCrossEntropy(b, classes, logits, labels, loss, dlogits, correct, stream_));
}

void CudaBackend::GatherRows(size_t row, int n, const int32_t* idx, const float* table,
                             float* out) {
  LS_LAUNCH(cuda::GatherRows(row, n, idx, table, out, stream_));
}

void CudaBackend::GatherLabels(int n, const int32_t* idx, const int32_t* table, int32_t* out) {
  LS_LAUNCH(cuda::GatherLabels(n, idx, table, out, stream_));
}

void CudaBackend::Divide(size_t n, float d, float* x) { LS_LAUNCH(cuda::Divide(n, d, x, stream_)); }

void CudaBackend::SumSquares(size_t n, const float* x, double* partials, double* out) {
  LS_LAUNCH(cuda::SumSquares(n, x, partials, out, stream_));
}

void CudaBackend::ClipByGlobalNorm(size_t n, float max_norm, const double* sum_squares, float* x) {
  LS_LAUNCH(cuda::ClipByGlobalNorm(n, max_norm, sum_squares, x, stream_));
}

void CudaBackend::SgdUpdate(size_t n, const UpdateScalars* s, float momentum, bool nesterov,
                            const float* g, float* trace, float* p) {
  LS_LAUNCH(cuda::SgdUpdate(n, s, momentum, nesterov, g, trace, p, stream_));
}

void CudaBackend::AdamUpdate(size_t n, const UpdateScalars* s, const float* g, float* mu, float* nu,
                             float* p) {
  LS_LAUNCH(cuda::AdamUpdate(n, s, g, mu, nu, p, stream_));
}

}  // namespace lockstep
