// CudaBackend, the class behind NewCudaBackend (cuda_backend.h). Internal to workers/:
// it includes CUDA headers, and the NCCL collective uses it to queue its all-reduce on
// the backend's stream and to watch the backend's waits (see SetSyncWatch).
#ifndef LOCKSTEP_WORKERS_CUDA_CUDA_BACKEND_IMPL_H_
#define LOCKSTEP_WORKERS_CUDA_CUDA_BACKEND_IMPL_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/backend.h"
#include "workers/cuda/cublaslt_dense.h"
#include "workers/cuda/cuda_backend.h"
#include "workers/cuda/cudnn_attention.h"
#include "workers/cuda/cudnn_conv.h"

namespace lockstep {

class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(int device,
                                                             const CudaBackendOptions& options);
  // The CudaBackend behind `backend`, or null when it is another kind of backend.
  static CudaBackend* From(Backend* backend);
  ~CudaBackend() override;

  std::string Name() const override;
  absl::StatusOr<Buffer> Allocate(size_t bytes) override;
  absl::StatusOr<Buffer> Upload(const void* host, size_t bytes) override;
  absl::Status CopyToDevice(void* dst, const void* host, size_t bytes) override;
  absl::Status CopyToHost(void* host, const void* src, size_t bytes) override;
  absl::Status Synchronize() override;
  absl::Status SetTf32(bool enabled) override;

  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) override;
  // cuBLASLt's GEMM with a bias and ReLU epilogue (cuda_backend_dense.cc), else Backend's.
  absl::Status DenseForward(int rows, int out, int in, const float* x, const float* w,
                            const float* bias, bool relu, float* y) override;
#if defined(LOCKSTEP_HAVE_CUDNN)
  // Convolutions on cuDNN where it takes g (cuda_backend_conv.cc), else Backend's.
  size_t ConvScratchBytes(const ConvGeometry& g) override;
  absl::Status ConvForward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                           float* y, void* scratch) override;
  absl::Status ConvForwardRelu(const ConvGeometry& g, const float* x, const float* w,
                               const float* bias, float* y, void* scratch) override;
  absl::Status ConvBackwardWeights(const ConvGeometry& g, const float* x, const float* dy,
                                   float* dw, float* dbias, void* scratch) override;
  absl::Status ConvBackwardData(const ConvGeometry& g, const float* w, const float* dy, float* dx,
                                void* scratch) override;
  // The bfloat16 convolutions on cuDNN where it takes g with bfloat16 operands, else
  // Backend's im2col + GemmBf16 (cuda_backend_conv.cc).
  size_t ConvScratchBytesBf16(const ConvGeometry& g) override;
  absl::Status ConvForwardBf16(const ConvGeometry& g, const Bf16* x, const Bf16* w, float* y,
                               void* scratch) override;
  absl::Status ConvBackwardWeightsBf16(const ConvGeometry& g, const Bf16* x, const Bf16* dy,
                                       float* dw, void* scratch) override;
  absl::Status ConvBackwardDataBf16(const ConvGeometry& g, const Bf16* w, const Bf16* dy, float* dx,
                                    void* scratch) override;
  // Fused attention on cuDNN's SDPA where it takes the shape and the job did not turn it
  // off (cuda_backend_attention.cc).
  absl::Status SetFusedAttention(bool enabled) override;
  bool FusedAttentionTakes(const AttentionShape& s) override;
  absl::Status FusedAttentionBf16(const AttentionShape& s, const Bf16* q, const Bf16* k,
                                  const Bf16* v, Bf16* o, float* stats) override;
  absl::Status FusedAttentionBackwardBf16(const AttentionShape& s, const Bf16* q, const Bf16* k,
                                          const Bf16* v, const Bf16* o, const Bf16* d_o,
                                          const float* stats, Bf16* dq16, Bf16* dk16, Bf16* dv16,
                                          float* dq, float* dk, float* dv) override;
#endif
  absl::Status Im2Col(const ConvGeometry& g, const float* x, float* cols) override;
  absl::Status Col2Im(const ConvGeometry& g, const float* dcols, float* dx) override;
  absl::Status BiasAdd(int rows, int cols, const float* bias, float* y) override;
  absl::Status BiasGrad(int rows, int cols, const float* dy, float* db) override;
  absl::Status Relu(size_t n, float* x) override;
  absl::Status ReluBackward(size_t n, const float* y, float* dy) override;
  absl::Status Activate(Activation a, size_t n, const float* x, float* y) override;
  absl::Status ActivateBackward(Activation a, size_t n, const float* x, float* dy) override;
  absl::Status AvgPool(const ConvGeometry& g, bool count_include_pad, const float* x,
                       float* y) override;
  absl::Status AvgPoolBackward(const ConvGeometry& g, bool count_include_pad, const float* dy,
                               float* dx) override;
  absl::Status MaxPool(const ConvGeometry& g, const float* x, float* y) override;
  absl::Status MaxPoolBackward(const ConvGeometry& g, const float* x, const float* dy,
                               float* dx) override;
  absl::Status LayerNorm(int rows, int cols, float epsilon, const float* x, const float* scale,
                         const float* bias, float* y, float* mean, float* rstd) override;
  absl::Status LayerNormBackward(int rows, int cols, const float* x, const float* scale,
                                 const float* mean, const float* rstd, const float* dy, float* dx,
                                 float* dscale, float* dbias) override;
  absl::Status BatchNormMoments(int rows, int cols, const float* x, float* partials,
                                float* moments) override;
  absl::Status BatchNormVariance(int cols, const float* moments, float* var) override;
  absl::Status BatchNormApply(int rows, int cols, float epsilon, const float* x, const float* mean,
                              const float* var, const float* scale, const float* bias,
                              float* y) override;
  absl::Status BatchNormUpdateStats(int cols, float momentum, float one_minus_momentum,
                                    const float* mean, const float* var, float* ra_mean,
                                    float* ra_var) override;
  absl::Status BatchNormBackwardReduce(int rows, int cols, float epsilon, const float* x,
                                       const float* dy, const float* mean, const float* var,
                                       float* partials, float* sums, float* dscale,
                                       float* dbias) override;
  absl::Status BatchNormBackwardApply(int rows, int cols, float epsilon, int replicas,
                                      const float* x, const float* dy, const float* moments,
                                      const float* var, const float* scale, const float* sums,
                                      float* dx) override;
  absl::Status Dropout(size_t n, float keep, const rng::Key* key, rng::Impl impl, const float* x,
                       float* y, uint8_t* mask) override;
  absl::Status DropoutBackward(size_t n, float keep, const uint8_t* mask, const float* dy,
                               float* dx) override;
  absl::Status SoftmaxCrossEntropy(int b, int classes, const float* logits, const int32_t* labels,
                                   float* loss, float* dlogits, float* correct) override;
  absl::Status GatherRows(size_t row, int n, const int32_t* idx, const float* table,
                          float* out) override;
  absl::Status GatherLabels(int n, const int32_t* idx, const int32_t* table, int32_t* out) override;
  absl::Status Copy(size_t n, const float* x, float* y) override;
  absl::Status Add(size_t n, const float* a, const float* b, float* y) override;
  absl::Status Embed(int n, int features, const float* ids, const float* table,
                     float* out) override;
  absl::Status EmbedBackward(int n, int features, int num_embeddings, const float* ids,
                             const float* dy, float* dtable) override;
  absl::Status AddRows(int rows, int cols, const float* x, const float* bias, float* y) override;
  absl::Status GemmStrided(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                           const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                           int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                           int count) override;
  absl::Status AttentionSoftmax(int rows, int t, bool causal, float* s) override;
  absl::Status SoftmaxBackward(int rows, int cols, const float* p, float* dp) override;
  absl::Status MaskedScale(int rows, int cols, const uint8_t* mask, float scale, const float* x,
                           float* y) override;
  absl::Status ClassToken(int b, int t, int f, const float* cls, const float* x, float* y) override;
  absl::Status ClassTokenBackward(int b, int t, int f, const float* dy, float* dx,
                                  float* dcls) override;
  absl::Status SequencePool(bool mean, int b, int t, int f, const float* x, float* y) override;
  absl::Status SequencePoolBackward(bool mean, int b, int t, int f, const float* dy,
                                    float* dx) override;
  absl::Status Divide(size_t n, float d, float* x) override;
  absl::Status SumSquares(size_t n, const float* x, double* partials, double* out) override;
  absl::Status ClipByGlobalNorm(size_t n, float max_norm, const double* sum_squares,
                                float* x) override;
  absl::Status SgdUpdate(size_t n, const UpdateScalars* s, float momentum, bool nesterov,
                         const float* g, float* trace, float* p) override;
  absl::Status AdamUpdate(size_t n, const UpdateScalars* s, const float* g, float* mu, float* nu,
                          float* p) override;
  // One kernel for the whole update (cuda_backend_update.cc, fused_update.cu).
  absl::Status ApplyUpdate(const UpdateStep& u, size_t n, const UpdateScalars* s,
                           double* norm_scratch, float* grads, float* slot0, float* slot1,
                           float* params) override;
  // Mixed precision (cuda_backend_bf16.cc): cuBLAS bfloat16 GEMMs with float32 sums, the
  // CPU's roundings elsewhere (bf16.cuh); convolutions on cuDNN where it takes them (above),
  // else Backend's im2col + GemmBf16.
  absl::Status Bf16Support() override;
  absl::Status ToBf16(size_t n, const float* x, Bf16* y) override;
  absl::Status AddRowsBf16(int rows, int cols, const float* x, const float* bias, float* y,
                           Bf16* y16) override;
  absl::Status GemmBf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const Bf16* a,
                        const Bf16* b, float beta, float* c) override;
  absl::Status GemmStridedBf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                               const Bf16* a, int lda, int64_t stride_a, const Bf16* b, int ldb,
                               int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                               int count) override;
  absl::Status Im2ColBf16(const ConvGeometry& g, const Bf16* x, Bf16* cols) override;
  absl::Status ActivateBf16(Activation a, size_t n, const float* x, float* y, Bf16* y16) override;
  absl::Status ReluBf16(size_t n, float* x, Bf16* x16) override;
  absl::Status AvgPoolBf16(const ConvGeometry& g, bool count_include_pad, const float* x,
                           float* y) override;
  absl::Status AttentionSoftmaxBf16(int rows, int t, bool causal, float* s) override;
  // The exact sum's conversions (cuda_backend_exact.cc, exact_sum.cu).
  absl::Status ExactBlockExponents(size_t n, size_t block, const float* x, bool accumulate,
                                   int64_t* exponents) override;
  absl::Status ExactToFixed(size_t n, size_t block, int headroom, const int64_t* exponents,
                            const float* x, bool accumulate, int64_t* fixed) override;
  absl::Status ExactFromFixed(size_t n, size_t block, int headroom, const int64_t* exponents,
                              const int64_t* fixed, float* out) override;

  // Captures the work `body` queues on the stream into a CUDA graph (thread-local capture
  // mode). Errors: body's own, or the capture's (INTERNAL naming the CUDA error), which
  // includes a kernel or cuBLAS launch that failed during the capture: nothing captured
  // has run, so such a failure fails the capture only and the backend stays usable (the
  // caller can run the same work eagerly). A backend already failed returns its error.
  absl::StatusOr<std::unique_ptr<Graph>> Capture(
      const std::function<absl::Status()>& body) override;

  int device() const { return device_; }
  // Why convolutions run on im2col + cuBLAS rather than cuDNN (no cuDNN in the build or at
  // run time, or turned off), or "" when cuDNN is in use.
  const std::string& cudnn_off() const { return cudnn_off_; }
  // Whether cuDNN takes g's convolutions on float32 or (bf16) bfloat16 operands (tests and
  // diagnostics); `why` when not.
  bool CudnnTakes(const ConvGeometry& g, std::string* why = nullptr, bool bf16 = false);
  cudaStream_t stream() const { return stream_; }

  // Makes this backend's device the calling thread's current device.
  absl::Status Activate();

  // A check Synchronize() calls while it waits, with how long it has waited; a non-OK
  // status becomes the backend's error and ends the wait once the stream drains (or
  // after a grace period). The NCCL collective uses this to abort its communicator when
  // a collective in flight times out. One watch at a time; null removes it.
  using SyncWatch = std::function<absl::Status(absl::Duration waited)>;
  absl::Status SetSyncWatch(SyncWatch watch);
  bool watched() const { return static_cast<bool>(watch_); }

  // Keeps the first error for Synchronize(); later ones are dropped. During Capture, keeps
  // it for the capture instead.
  void RecordError(absl::Status status);

 private:
  CudaBackend(int device, bool tf32) : device_(device), tf32_(tf32) {}
  absl::Status Init(bool cudnn);
  // A failed launch or cuBLAS call of the kernel named `what`, recorded (RecordError) and
  // returned by Failed; OK on success.
  absl::Status Check(cudaError_t error, const char* what, const char* file, int line);
  absl::Status Check(cublasStatus_t status, const char* what, const char* file, int line);
  // Records `status` (not OK) for Synchronize() and returns it; while capturing, records it
  // for the capture instead and returns OK, so that the capture fails and the caller can
  // run the same work eagerly.
  absl::Status Failed(absl::Status status);
  absl::Status WaitWatched();

  const int device_;
  bool tf32_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  float* bias_scratch_ = nullptr;  // BiasGrad's chunk sums (bias_plan.h)
  std::unique_ptr<LtDense> lt_;    // dense layers' GEMMs with their bias (null: Gemm + BiasAdd)
#if defined(LOCKSTEP_HAVE_CUDNN)
  std::unique_ptr<CudnnConvs> cudnn_;     // null: convolutions on im2col + cuBLAS
  std::unique_ptr<CudnnAttention> sdpa_;  // null: attention on batched GEMMs
  bool fused_attention_ = true;           // SetFusedAttention
#endif
  std::string cudnn_off_ = "this build has no cuDNN";
  absl::Status first_error_;
  bool capturing_ = false;      // inside Capture's body
  absl::Status capture_error_;  // the first launch error while capturing
  SyncWatch watch_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_CUDA_CUDA_BACKEND_IMPL_H_
