// The CPU backend: the Backend interface over the kernels of the files beside it (oneDNN
// convolutions and matmuls, OpenBLAS GEMMs, OpenMP loops for the rest). Contract: cpu_backend.h.
#include "workers/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "workers/cpu/cpu_batch_norm.h"
#include "workers/cpu/cpu_bf16.h"
#include "workers/cpu/cpu_elementwise.h"
#include "workers/cpu/cpu_gemm.h"
#include "workers/cpu/cpu_im2col.h"
#include "workers/cpu/cpu_layer_norm.h"
#include "workers/cpu/cpu_layers.h"
#include "workers/cpu/cpu_optimizer.h"
#include "workers/cpu/cpu_sequence.h"
#include "workers/cpu/cpu_sums.h"
#include "workers/cpu/dnnl_conv.h"
#include "workers/cpu/dnnl_matmul.h"
#include "workers/cpu/heads_gemm_bf16.h"

namespace lockstep {
namespace {

// A conv kernel's gradient sums over at most this many positions (b * oh * ow) at once.
constexpr size_t kConvSumPositions = 4096;

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, CpuKernels kernels)
      : threads_(threads), onednn_gemm_(kernels == CpuKernels::kOneDnn), matmul_(threads) {
    if (kernels == CpuKernels::kOneDnn) {
      conv_ = std::make_unique<cpu::DnnlConv>(threads);
      conv_bf16_ = std::make_unique<cpu::DnnlConv>(threads, /*bf16=*/true);
    }
  }

  std::string Name() const override { return "cpu"; }
  bool host_memory() const override { return true; }

  absl::StatusOr<Buffer> Allocate(size_t bytes) override {
    void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
    if (p == nullptr) return absl::ResourceExhaustedError("cpu: out of memory");
    std::memset(p, 0, bytes);
    return Buffer(p, bytes, [](void* q) { std::free(q); });
  }

  absl::StatusOr<Buffer> Upload(const void* host, size_t bytes) override {
    return Buffer(const_cast<void*>(host), bytes, nullptr);  // alias: no copy
  }

  absl::Status CopyToDevice(void* dst, const void* host, size_t bytes) override {
    if (dst != host) std::memcpy(dst, host, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* host, const void* src, size_t bytes) override {
    if (host != src) std::memcpy(host, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) override {
    return cpu::Gemm(threads_, onednn_gemm_, ta, tb, m, n, k, alpha, a, b, beta, c);
  }

  size_t ConvScratchBytes(const ConvGeometry& g) override {
    return conv_ != nullptr && conv_->Supports(g) ? 0 : Backend::ConvScratchBytes(g);
  }

  absl::Status ConvForward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                           float* y, void* scratch) override {
    ASSIGN_OR_RETURN(const bool dnnl, UseDnnl(g, scratch));
    if (dnnl) return conv_->Forward(g, x, w, bias, y);
    return Backend::ConvForward(g, x, w, bias, y, scratch);
  }

  // Both gradients are long sums over the b * oh * ow positions, summed in a fixed tree
  // (cpu_sums.h) for precision as good as XLA's: the bias's blockwise; the kernel's, past
  // kConvSumPositions, over chunks of images whose gradients are added pairwise.
  absl::Status ConvBackwardWeights(const ConvGeometry& g, const float* x, const float* dy,
                                   float* dw, float* dbias, void* scratch) override {
    const size_t positions = static_cast<size_t>(g.oh()) * g.ow();
    if (dbias != nullptr)
      cpu::ColumnSums(threads_, static_cast<int>(g.b * positions), g.f, dy, dbias);
    const int per = static_cast<int>(std::max<size_t>(1, kConvSumPositions / positions));
    if (per >= g.b) return KernelGradient(g, x, dy, dw, scratch);
    const int chunks = (g.b + per - 1) / per;
    const size_t size = static_cast<size_t>(g.kh) * g.kw * g.c * g.f;
    const size_t in = static_cast<size_t>(g.h) * g.w * g.c, out = positions * g.f;
    const size_t patches = positions * g.kh * g.kw * g.c;  // the default path's, per image
    thread_local std::vector<float> parts;
    parts.resize(chunks * size);
    for (int i = 0; i < chunks; ++i) {
      ConvGeometry part = g;
      part.b = std::min(per, g.b - i * per);
      const size_t first = static_cast<size_t>(i) * per;
      void* part_scratch =
          scratch == nullptr ? nullptr : static_cast<float*>(scratch) + first * patches;
      RETURN_IF_ERROR(KernelGradient(part, x + first * in, dy + first * out,
                                     parts.data() + i * size, part_scratch));
    }
    cpu::PairwiseSum(threads_, chunks, size, parts.data(), dw);
    return absl::OkStatus();
  }

  absl::Status ConvBackwardData(const ConvGeometry& g, const float* w, const float* dy, float* dx,
                                void* scratch) override {
    ASSIGN_OR_RETURN(const bool dnnl, UseDnnl(g, scratch));
    if (dnnl) return conv_->BackwardData(g, w, dy, dx);
    return Backend::ConvBackwardData(g, w, dy, dx, scratch);
  }

  absl::Status Im2Col(const ConvGeometry& g, const float* x, float* cols) override {
    cpu::Im2Col(threads_, g, x, cols);
    return absl::OkStatus();
  }

  absl::Status Col2Im(const ConvGeometry& g, const float* dcols, float* dx) override {
    cpu::Col2Im(threads_, g, dcols, dx);
    return absl::OkStatus();
  }

  absl::Status BiasAdd(int rows, int cols, const float* bias, float* y) override {
    cpu::BiasAdd(threads_, rows, cols, bias, y);
    return absl::OkStatus();
  }

  absl::Status BiasGrad(int rows, int cols, const float* dy, float* db) override {
    cpu::BiasGrad(threads_, rows, cols, dy, db);
    return absl::OkStatus();
  }

  absl::Status Relu(size_t n, float* x) override {
    cpu::Relu(threads_, n, x);
    return absl::OkStatus();
  }

  absl::Status ReluBackward(size_t n, const float* y, float* dy) override {
    cpu::ReluBackward(threads_, n, y, dy);
    return absl::OkStatus();
  }

  absl::Status Activate(Activation a, size_t n, const float* x, float* y) override {
    cpu::Activate(threads_, a, n, x, y);
    return absl::OkStatus();
  }

  absl::Status ActivateBackward(Activation a, size_t n, const float* x, float* dy) override {
    cpu::ActivateBackward(threads_, a, n, x, dy);
    return absl::OkStatus();
  }

  absl::Status AvgPool(const ConvGeometry& g, bool count_include_pad, const float* x,
                       float* y) override {
    cpu::AvgPool(threads_, g, count_include_pad, x, y);
    return absl::OkStatus();
  }

  absl::Status AvgPoolBackward(const ConvGeometry& g, bool count_include_pad, const float* dy,
                               float* dx) override {
    cpu::AvgPoolBackward(threads_, g, count_include_pad, dy, dx);
    return absl::OkStatus();
  }

  absl::Status MaxPool(const ConvGeometry& g, const float* x, float* y) override {
    cpu::MaxPool(threads_, g, x, y);
    return absl::OkStatus();
  }

  absl::Status MaxPoolBackward(const ConvGeometry& g, const float* x, const float* dy,
                               float* dx) override {
    cpu::MaxPoolBackward(threads_, g, x, dy, dx);
    return absl::OkStatus();
  }

  absl::Status LayerNorm(int rows, int cols, float epsilon, const float* x, const float* scale,
                         const float* bias, float* y, float* mean, float* rstd) override {
    cpu::LayerNorm(threads_, rows, cols, epsilon, x, scale, bias, y, mean, rstd);
    return absl::OkStatus();
  }

  absl::Status LayerNormBackward(int rows, int cols, const float* x, const float* scale,
                                 const float* mean, const float* rstd, const float* dy, float* dx,
                                 float* dscale, float* dbias) override {
    cpu::LayerNormBackward(threads_, rows, cols, x, scale, mean, rstd, dy, dx, dscale, dbias);
    return absl::OkStatus();
  }

  absl::Status BatchNormMoments(int rows, int cols, const float* x, float* partials,
                                float* moments) override {
    cpu::BatchNormMoments(threads_, rows, cols, x, partials, moments);
    return absl::OkStatus();
  }
  absl::Status BatchNormVariance(int cols, const float* moments, float* var) override {
    cpu::BatchNormVariance(cols, moments, var);
    return absl::OkStatus();
  }
  absl::Status BatchNormApply(int rows, int cols, float epsilon, const float* x, const float* mean,
                              const float* var, const float* scale, const float* bias,
                              float* y) override {
    cpu::BatchNormApply(threads_, rows, cols, epsilon, x, mean, var, scale, bias, y);
    return absl::OkStatus();
  }
  absl::Status BatchNormUpdateStats(int cols, float momentum, float one_minus_momentum,
                                    const float* mean, const float* var, float* ra_mean,
                                    float* ra_var) override {
    cpu::BatchNormUpdateStats(cols, momentum, one_minus_momentum, mean, var, ra_mean, ra_var);
    return absl::OkStatus();
  }
  absl::Status BatchNormBackwardReduce(int rows, int cols, float epsilon, const float* x,
                                       const float* dy, const float* mean, const float* var,
                                       float* partials, float* sums, float* dscale,
                                       float* dbias) override {
    cpu::BatchNormBackwardReduce(threads_, rows, cols, epsilon, x, dy, mean, var, partials, sums,
                                 dscale, dbias);
    return absl::OkStatus();
  }
  absl::Status BatchNormBackwardApply(int rows, int cols, float epsilon, int replicas,
                                      const float* x, const float* dy, const float* moments,
                                      const float* var, const float* scale, const float* sums,
                                      float* dx) override {
    cpu::BatchNormBackwardApply(threads_, rows, cols, epsilon, replicas, x, dy, moments, var, scale,
                                sums, dx);
    return absl::OkStatus();
  }

  absl::Status Dropout(size_t n, float keep, const rng::Key* key, rng::Impl impl, const float* x,
                       float* y, uint8_t* mask) override {
    cpu::Dropout(threads_, n, keep, *key, impl, x, y, mask);
    return absl::OkStatus();
  }

  absl::Status DropoutBf16(int rows, int cols, float keep, const rng::Key* key, rng::Impl impl,
                           const float* x, float* y, uint8_t* mask, Bf16* y16) override {
    cpu::DropoutBf16(threads_, static_cast<size_t>(rows) * cols, keep, *key, impl, x, y, mask, y16);
    return absl::OkStatus();
  }

  absl::Status DropoutBackward(size_t n, float keep, const uint8_t* mask, const float* dy,
                               float* dx) override {
    cpu::DropoutBackward(threads_, n, keep, mask, dy, dx);
    return absl::OkStatus();
  }

  absl::Status SoftmaxCrossEntropy(int b, int classes, const float* logits, const int32_t* labels,
                                   float* loss, float* dlogits, float* correct) override {
    cpu::SoftmaxCrossEntropy(threads_, b, classes, logits, labels, loss, dlogits, correct);
    return absl::OkStatus();
  }

  absl::Status GatherRows(size_t row, int n, const int32_t* idx, const float* table,
                          float* out) override {
    cpu::GatherRows(threads_, row, n, idx, table, out);
    return absl::OkStatus();
  }

  absl::Status GatherLabels(int n, const int32_t* idx, const int32_t* table,
                            int32_t* out) override {
    cpu::GatherLabels(n, idx, table, out);
    return absl::OkStatus();
  }

  absl::Status Copy(size_t n, const float* x, float* y) override {
    cpu::Copy(threads_, n, x, y);
    return absl::OkStatus();
  }

  absl::Status Add(size_t n, const float* a, const float* b, float* y) override {
    cpu::Add(threads_, n, a, b, y);
    return absl::OkStatus();
  }

  absl::Status Embed(int n, int features, const float* ids, const float* table,
                     float* out) override {
    cpu::Embed(threads_, n, features, ids, table, out);
    return absl::OkStatus();
  }
  absl::Status EmbedBackward(int n, int features, int num_embeddings, const float* ids,
                             const float* dy, float* dtable) override {
    cpu::EmbedBackward(threads_, n, features, num_embeddings, ids, dy, dtable);
    return absl::OkStatus();
  }
  absl::Status AddRows(int rows, int cols, const float* x, const float* bias, float* y) override {
    cpu::AddRows(threads_, rows, cols, x, bias, y);
    return absl::OkStatus();
  }
  absl::Status GemmStrided(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                           int lda, int64_t stride_a, const float* b, int ldb, int64_t stride_b,
                           float beta, float* c, int ldc, int64_t stride_c, int count) override {
    cpu::GemmStrided(threads_, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
                     ldc, stride_c, count);
    return absl::OkStatus();
  }
  absl::Status AttentionSoftmax(int rows, int t, bool causal, float* s) override {
    cpu::AttentionSoftmax(threads_, rows, t, causal, s);
    return absl::OkStatus();
  }
  absl::Status SoftmaxBackward(int rows, int cols, const float* p, float* dp) override {
    cpu::SoftmaxBackward(threads_, rows, cols, p, dp);
    return absl::OkStatus();
  }
  absl::Status MaskedScale(int rows, int cols, const uint8_t* mask, float scale, const float* x,
                           float* y) override {
    cpu::MaskedScale(threads_, rows, cols, mask, scale, x, y);
    return absl::OkStatus();
  }

  absl::Status Bf16Support() override { return cpu::Bf16Isa(); }
  absl::Status ToBf16(size_t n, const float* x, Bf16* y) override {
    cpu::ToBf16(threads_, n, x, y);
    return absl::OkStatus();
  }
  absl::Status AddRowsBf16(int rows, int cols, const float* x, const float* bias, float* y,
                           Bf16* y16) override {
    cpu::AddRowsBf16(threads_, rows, cols, x, bias, y, y16);
    return absl::OkStatus();
  }
  absl::Status BatchNormApplyBf16(int rows, int cols, float epsilon, const float* x,
                                  const float* mean, const float* var, const float* scale,
                                  const float* bias, bool relu, float* y, Bf16* y16) override {
    cpu::BatchNormApplyBf16(threads_, rows, cols, epsilon, x, mean, var, scale, bias, relu, y, y16);
    return absl::OkStatus();
  }
  bool TakesUnroundedBatchNormInput() override { return true; }
  absl::Status BatchNormMomentsBf16(int rows, int cols, const float* x, float* partials,
                                    float* moments) override {
    cpu::BatchNormMoments(threads_, rows, cols, x, partials, moments, /*round_x=*/true);
    return absl::OkStatus();
  }
  absl::Status BatchNormBackwardReduceBf16(int rows, int cols, float epsilon, const float* x,
                                           const float* dy, const float* mean, const float* var,
                                           float* partials, float* sums, float* dscale,
                                           float* dbias) override {
    cpu::BatchNormBackwardReduce(threads_, rows, cols, epsilon, x, dy, mean, var, partials, sums,
                                 dscale, dbias, /*round_x=*/true);
    return absl::OkStatus();
  }
  absl::Status BatchNormBackwardApplyBf16(int rows, int cols, float epsilon, int replicas,
                                          const float* x, const float* dy, const float* moments,
                                          const float* var, const float* scale, const float* sums,
                                          Bf16* dx16) override {
    cpu::BatchNormBackwardApplyBf16(threads_, rows, cols, epsilon, replicas, x, dy, moments, var,
                                    scale, sums, dx16);
    return absl::OkStatus();
  }
  absl::Status AddBf16(int rows, int cols, const float* a, const float* b, bool relu, float* y,
                       Bf16* y16) override {
    cpu::AddBf16(threads_, static_cast<size_t>(rows) * cols, a, b, relu, y, y16);
    return absl::OkStatus();
  }
  absl::Status GemmBf16(bool ta, bool tb, int m, int n, int k, float alpha, const Bf16* a,
                        const Bf16* b, float beta, float* c) override {
    return matmul_.Run(ta, tb, m, n, k, alpha, a, ta ? m : k, 0, b, tb ? k : n, 0, beta, c, n, 0,
                       1);
  }
  absl::Status GemmStridedBf16(bool ta, bool tb, int m, int n, int k, float alpha, const Bf16* a,
                               int lda, int64_t stride_a, const Bf16* b, int ldb, int64_t stride_b,
                               float beta, float* c, int ldc, int64_t stride_c,
                               int count) override {
    return matmul_.Run(ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                       stride_c, count);
  }
  absl::Status BiasGradBf16(int rows, int cols, const float* dy, float* db, Bf16* dy16) override {
    if (db == nullptr) return ToBf16(static_cast<size_t>(rows) * cols, dy, dy16);
    cpu::BiasGrad(threads_, rows, cols, dy, db, dy16);
    return absl::OkStatus();
  }
  absl::Status GemmHeadsBf16(bool ta, bool tb, int m, int n, int k, float alpha,
                             HeadsOperand<const Bf16> a, HeadsOperand<const Bf16> b, float beta,
                             HeadsOperand<float> c, int count, int heads) override {
    if (cpu::HeadsGemmBf16Preferred(m, n, k)) {
      cpu::HeadsGemmBf16(threads_, ta, tb, m, n, k, alpha, a, b, beta, c, count, heads);
      return absl::OkStatus();
    }
    return matmul_.Run(ta, tb, m, n, k, alpha, a.p, a.ld, a.stride, b.p, b.ld, b.stride, beta, c.p,
                       c.ld, c.stride, count, heads, a.head, b.head, c.head);
  }
  size_t ConvScratchBytesBf16(const ConvGeometry& g) override {
    return conv_bf16_ != nullptr && conv_bf16_->Supports(g) ? 0 : Backend::ConvScratchBytesBf16(g);
  }
  absl::Status ConvForwardBf16(const ConvGeometry& g, const Bf16* x, const Bf16* w, float* y,
                               void* scratch) override {
    ASSIGN_OR_RETURN(const bool dnnl, UseDnnlBf16(g, scratch));
    if (dnnl) return conv_bf16_->Forward(g, x, w, y);
    return Backend::ConvForwardBf16(g, x, w, y, scratch);
  }
  absl::Status ConvBackwardWeightsBf16(const ConvGeometry& g, const Bf16* x, const Bf16* dy,
                                       float* dw, void* scratch) override {
    ASSIGN_OR_RETURN(const bool dnnl, UseDnnlBf16(g, scratch));
    if (dnnl) return conv_bf16_->BackwardWeights(g, x, dy, dw);
    return Backend::ConvBackwardWeightsBf16(g, x, dy, dw, scratch);
  }
  absl::Status ConvBackwardDataBf16(const ConvGeometry& g, const Bf16* w, const Bf16* dy, float* dx,
                                    void* scratch) override {
    ASSIGN_OR_RETURN(const bool dnnl, UseDnnlBf16(g, scratch));
    if (dnnl) return conv_bf16_->BackwardData(g, w, dy, dx);
    return Backend::ConvBackwardDataBf16(g, w, dy, dx, scratch);
  }
  absl::Status Im2ColBf16(const ConvGeometry& g, const Bf16* x, Bf16* cols) override {
    cpu::Im2ColBf16(threads_, g, x, cols);
    return absl::OkStatus();
  }
  absl::Status DivideBf16(size_t n, float d, float* x, Bf16* y16) override {
    cpu::DivideBf16(threads_, n, d, x, y16);
    return absl::OkStatus();
  }
  absl::Status MaskedScaleBf16(int rows, int cols, const uint8_t* mask, float scale, const float* x,
                               float*, Bf16* y16) override {
    cpu::MaskedScaleBf16(threads_, rows, cols, mask, scale, x, y16);
    return absl::OkStatus();
  }
  absl::Status SoftmaxBackwardBf16(int rows, int t, bool causal, const float* p,
                                   const uint8_t* mask, float scale, float* dp,
                                   Bf16* dp16) override {
    cpu::SoftmaxBackwardBf16(threads_, rows, t, causal, p, mask, scale, dp, dp16);
    return absl::OkStatus();
  }
  absl::Status ActivateBf16(Activation a, size_t n, const float* x, float* y, Bf16* y16) override {
    cpu::ActivateBf16(threads_, a, n, x, y, y16);
    return absl::OkStatus();
  }
  absl::Status ReluBf16(size_t n, float* x, Bf16* x16) override {
    cpu::ReluBf16(threads_, n, x, x16);
    return absl::OkStatus();
  }
  absl::Status AvgPoolBf16(const ConvGeometry& g, bool count_include_pad, const float* x,
                           float* y) override {
    cpu::AvgPoolBf16(threads_, g, count_include_pad, x, y);
    return absl::OkStatus();
  }
  absl::Status AttentionSoftmaxBf16(int rows, int t, bool causal, float* s) override {
    cpu::AttentionSoftmaxBf16(threads_, rows, t, causal, s);
    return absl::OkStatus();
  }

  absl::Status ClassToken(int b, int t, int f, const float* cls, const float* x,
                          float* y) override {
    cpu::ClassToken(threads_, b, t, f, cls, x, y);
    return absl::OkStatus();
  }
  absl::Status ClassTokenBackward(int b, int t, int f, const float* dy, float* dx,
                                  float* dcls) override {
    cpu::ClassTokenBackward(threads_, b, t, f, dy, dx, dcls);
    return absl::OkStatus();
  }
  absl::Status SequencePool(bool mean, int b, int t, int f, const float* x, float* y) override {
    cpu::SequencePool(threads_, mean, b, t, f, x, y);
    return absl::OkStatus();
  }
  absl::Status SequencePoolBackward(bool mean, int b, int t, int f, const float* dy,
                                    float* dx) override {
    cpu::SequencePoolBackward(threads_, mean, b, t, f, dy, dx);
    return absl::OkStatus();
  }

  absl::Status Divide(size_t n, float d, float* x) override {
    cpu::Divide(threads_, n, d, x);
    return absl::OkStatus();
  }

  absl::Status SumSquares(size_t n, const float* x, double* partials, double* out) override {
    cpu::SumSquares(threads_, n, x, partials, out);
    return absl::OkStatus();
  }

  absl::Status ClipByGlobalNorm(size_t n, float max_norm, const double* sum_squares,
                                float* x) override {
    cpu::ClipByGlobalNorm(threads_, n, max_norm, *sum_squares, x);
    return absl::OkStatus();
  }

  absl::Status SgdUpdate(size_t n, const UpdateScalars* s, float momentum, bool nesterov,
                         const float* g, float* trace, float* p) override {
    cpu::SgdUpdate(threads_, n, *s, momentum, nesterov, g, trace, p);
    return absl::OkStatus();
  }

  absl::Status AdamUpdate(size_t n, const UpdateScalars* scalars, const float* g, float* mu,
                          float* nu, float* p) override {
    cpu::AdamUpdate(threads_, n, *scalars, g, mu, nu, p);
    return absl::OkStatus();
  }

 private:
  // Whether a conv runs on oneDNN; otherwise on the defaults, which need the scratch that
  // ConvScratchBytes asked for (none where oneDNN took the geometry at the workspace's
  // batch: it takes every batch of a shape it takes).
  // INTERNAL where neither can run it.
  // The kernel's gradient alone, by oneDNN or the default path.
  absl::Status KernelGradient(const ConvGeometry& g, const float* x, const float* dy, float* dw,
                              void* scratch) {
    ASSIGN_OR_RETURN(const bool dnnl, UseDnnl(g, scratch));
    if (dnnl) return conv_->BackwardWeights(g, x, dy, dw, nullptr);
    return Backend::ConvBackwardWeights(g, x, dy, dw, nullptr, scratch);
  }

  absl::StatusOr<bool> UseDnnl(const ConvGeometry& g, void* scratch) {
    if (conv_ != nullptr && conv_->Supports(g)) return true;
    if (scratch == nullptr) {
      return absl::InternalError(absl::StrCat("cpu: oneDNN refused a conv at batch ", g.b,
                                              " that it took at a larger one (no scratch for "
                                              "the default convolution)"));
    }
    return false;
  }

  // UseDnnl for the bfloat16 convolutions.
  absl::StatusOr<bool> UseDnnlBf16(const ConvGeometry& g, void* scratch) {
    if (conv_bf16_ != nullptr && conv_bf16_->Supports(g)) return true;
    if (scratch == nullptr) {
      return absl::InternalError(absl::StrCat("cpu: oneDNN refused a bf16 conv at batch ", g.b,
                                              " that it took at a larger one (no scratch for "
                                              "the default convolution)"));
    }
    return false;
  }

  const int threads_;
  const bool onednn_gemm_;
  std::unique_ptr<cpu::DnnlConv> conv_;       // null: kOpenBlas
  std::unique_ptr<cpu::DnnlConv> conv_bf16_;  // null: kOpenBlas
  cpu::DnnlMatmul matmul_;
};

}  // namespace

int DefaultCpuThreads() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::unique_ptr<Backend> NewCpuBackend(int threads, CpuKernels kernels) {
  return std::make_unique<CpuBackend>(std::max(1, threads), kernels);
}

}  // namespace lockstep
