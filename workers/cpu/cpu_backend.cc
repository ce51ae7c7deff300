// The CPU backend: oneDNN convolutions, oneDNN or OpenBLAS GEMMs, and OpenMP loops for the
// elementwise kernels. Contract: cpu_backend.h.
#include "workers/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/rng/random.h"
#include "core/status_macros.h"
#include "workers/cpu/cpu_batch_norm.h"
#include "workers/cpu/cpu_gemm.h"
#include "workers/cpu/cpu_layers.h"
#include "workers/cpu/cpu_optimizer.h"
#include "workers/cpu/cpu_sequence.h"
#include "workers/cpu/cpu_sums.h"
#include "workers/cpu/dnnl_conv.h"
#include "workers/cpu/multiversion.h"
#include "workers/cpu/parallel_min.h"

namespace lockstep {
namespace {

using cpu::kParallelMin;
using cpu::ParallelFor;

// A conv kernel's gradient sums over at most this many positions (b * oh * ow) at once.
constexpr size_t kConvSumPositions = 4096;

LS_MULTIVERSION void ReluRange(float* x, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

LS_MULTIVERSION void ReluBackwardRange(const float* y, float* dy, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

LS_MULTIVERSION void AddRange(const float* a, const float* b, float* y, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) y[i] = a[i] + b[i];
}

// Dropout of elements [begin, end) of n, the mask from random_bits(key, n): the kept
// values first, then a select per mode, so that no division is conditional and both
// loops (Threefry's rounds included) vectorize. x may be y.
LS_MULTIVERSION void DropoutRange(rng::Key k, rng::Impl impl, size_t n, float keep, const float* x,
                                  float* y, uint8_t* mask, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) y[i] = x[i] / keep;
  auto select = [&](size_t i, uint32_t bits) {
    const bool m = rng::BitsToUnitFloat(bits) < keep;
    mask[i] = m ? 1 : 0;
    y[i] = m ? y[i] : 0.0f;
  };
  if (impl == rng::Impl::kPartitionable) {
    for (size_t i = begin; i < end; ++i) {
      select(i, rng::RandomBitsAt(k, rng::Impl::kPartitionable, i, n));
    }
  } else {
    for (size_t i = begin; i < end; ++i) select(i, rng::RandomBitsAt(k, rng::Impl::kLegacy, i, n));
  }
}

LS_MULTIVERSION void DivideRange(float d, float* x, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) x[i] /= d;
}

LS_MULTIVERSION void BiasAddRows(int cols, const float* bias, float* y, size_t begin, size_t end) {
  for (size_t r = begin; r < end; ++r) {
    float* row = y + r * cols;
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

// sum[c] = column sums of rows [begin, end), top to bottom, accumulated in double.
LS_MULTIVERSION void ColumnSums(int cols, const float* dy, double* sum, size_t begin, size_t end) {
  std::fill_n(sum, cols, 0.0);
  for (size_t r = begin; r < end; ++r) {
    const float* row = dy + r * cols;
    for (int c = 0; c < cols; ++c) sum[c] += row[c];
  }
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, CpuKernels kernels)
      : threads_(threads), onednn_gemm_(kernels == CpuKernels::kOneDnn) {
    if (kernels == CpuKernels::kOneDnn) conv_ = std::make_unique<cpu::DnnlConv>(threads);
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
    const int oh = g.oh(), ow = g.ow();
    const size_t krow = static_cast<size_t>(g.kw) * g.c;  // one kernel row of a patch
    const size_t patch = static_cast<size_t>(g.kh) * krow;
#pragma omp parallel for num_threads(threads_) collapse(2) schedule(static)
    for (int n = 0; n < g.b; ++n) {
      for (int y = 0; y < oh; ++y) {
        for (int x0 = 0; x0 < ow; ++x0) {
          float* out = cols + ((static_cast<size_t>(n) * oh + y) * ow + x0) * patch;
          // Kernel columns [j0, j1) fall inside the image: per kernel row, one contiguous
          // run of input pixels, zeros around it.
          const int left = x0 * g.stride_w - g.pad_left;  // the input column of kernel column 0
          const int j0 = std::max(0, -left), j1 = std::min(g.kw, g.w - left);
          for (int i = 0; i < g.kh; ++i, out += krow) {
            const int yy = y * g.stride_h - g.pad_top + i;
            if (yy < 0 || yy >= g.h || j0 >= j1) {
              std::fill(out, out + krow, 0.0f);
              continue;
            }
            std::fill(out, out + static_cast<size_t>(j0) * g.c, 0.0f);
            std::copy_n(x + ((static_cast<size_t>(n) * g.h + yy) * g.w + (left + j0)) * g.c,
                        static_cast<size_t>(j1 - j0) * g.c, out + static_cast<size_t>(j0) * g.c);
            std::fill(out + static_cast<size_t>(j1) * g.c, out + krow, 0.0f);
          }
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status Col2Im(const ConvGeometry& g, const float* dcols, float* dx) override {
    const int oh = g.oh(), ow = g.ow();
    const size_t patch = static_cast<size_t>(g.kh) * g.kw * g.c;
    // Gather form: each input pixel sums the patch entries that read it, in a fixed
    // order (kernel row, then column), so threads never write the same element.
#pragma omp parallel for num_threads(threads_) collapse(2) schedule(static)
    for (int n = 0; n < g.b; ++n) {
      for (int yy = 0; yy < g.h; ++yy) {
        for (int xx = 0; xx < g.w; ++xx) {
          float* out = dx + ((static_cast<size_t>(n) * g.h + yy) * g.w + xx) * g.c;
          std::fill(out, out + g.c, 0.0f);
          for (int i = 0; i < g.kh; ++i) {
            const int ty = yy + g.pad_top - i;  // y * stride_h for the output row y reading it
            if (ty < 0 || ty % g.stride_h != 0 || ty / g.stride_h >= oh) continue;
            const int y = ty / g.stride_h;
            for (int j = 0; j < g.kw; ++j) {
              const int tx = xx + g.pad_left - j;
              if (tx < 0 || tx % g.stride_w != 0 || tx / g.stride_w >= ow) continue;
              const int x = tx / g.stride_w;
              const float* in = dcols + ((static_cast<size_t>(n) * oh + y) * ow + x) * patch +
                                (static_cast<size_t>(i) * g.kw + j) * g.c;
              for (int c = 0; c < g.c; ++c) out[c] += in[c];
            }
          }
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status BiasAdd(int rows, int cols, const float* bias, float* y) override {
    if (static_cast<size_t>(rows) * cols <= kParallelMin) {
      BiasAddRows(cols, bias, y, 0, rows);
      return absl::OkStatus();
    }
#pragma omp parallel num_threads(threads_)
    {
      const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      BiasAddRows(cols, bias, y, rows * t / nt, rows * (t + 1) / nt);
    }
    return absl::OkStatus();
  }

  absl::Status BiasGrad(int rows, int cols, const float* dy, float* db) override {
    // Partial sums over a fixed number of row blocks, combined in block order: the same
    // bits whatever the thread count.
    // Partial sums in double, each rounded once at the end.
    constexpr int kBlocks = 8;
    const int blocks = static_cast<size_t>(rows) * cols <= kParallelMin ? 1 : kBlocks;
    std::vector<double> partial(static_cast<size_t>(blocks) * cols);
#pragma omp parallel for num_threads(threads_) schedule(static) if (blocks > 1)
    for (int blk = 0; blk < blocks; ++blk) {
      ColumnSums(cols, dy, partial.data() + static_cast<size_t>(blk) * cols,
                 static_cast<size_t>(rows) * blk / blocks,
                 static_cast<size_t>(rows) * (blk + 1) / blocks);
    }
    for (int c = 0; c < cols; ++c) {
      double sum = 0;
      for (int blk = 0; blk < blocks; ++blk) sum += partial[static_cast<size_t>(blk) * cols + c];
      db[c] = static_cast<float>(sum);
    }
    return absl::OkStatus();
  }

  absl::Status Relu(size_t n, float* x) override {
    ParallelFor(threads_, n, [&](size_t b, size_t e) { ReluRange(x, b, e); });
    return absl::OkStatus();
  }

  absl::Status ReluBackward(size_t n, const float* y, float* dy) override {
    ParallelFor(threads_, n, [&](size_t b, size_t e) { ReluBackwardRange(y, dy, b, e); });
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
    const rng::Key k = *key;
    ParallelFor(threads_, n, [&](size_t begin, size_t end) {
      DropoutRange(k, impl, n, keep, x, y, mask, begin, end);
    });
    return absl::OkStatus();
  }

  absl::Status DropoutBackward(size_t n, float keep, const uint8_t* mask, const float* dy,
                               float* dx) override {
    for (size_t i = 0; i < n; ++i) dx[i] = mask[i] ? dy[i] / keep : 0.0f;
    return absl::OkStatus();
  }

  absl::Status SoftmaxCrossEntropy(int b, int classes, const float* logits, const int32_t* labels,
                                   float* loss, float* dlogits, float* correct) override {
    const float inv_b = 1.0f / static_cast<float>(b);
#pragma omp parallel for num_threads(threads_) \
    schedule(static) if (static_cast <size_t>(b) * classes > kParallelMin)
    for (int r = 0; r < b; ++r) {
      const float* z = logits + static_cast<size_t>(r) * classes;
      float* dz = dlogits + static_cast<size_t>(r) * classes;
      int argmax = 0;
      for (int c = 1; c < classes; ++c) argmax = z[c] > z[argmax] ? c : argmax;
      const float mx = z[argmax];
      float sum = 0.0f;
      for (int c = 0; c < classes; ++c) sum += std::exp(z[c] - mx);
      const float lse = std::log(sum);
      const int label = labels[r];
      loss[r] = -((z[label] - mx) - lse);
      for (int c = 0; c < classes; ++c) {
        const float softmax = std::exp((z[c] - mx) - lse);
        dz[c] = (softmax - (c == label ? 1.0f : 0.0f)) * inv_b;
      }
      correct[r] = argmax == label ? 1.0f : 0.0f;
    }
    return absl::OkStatus();
  }

  absl::Status GatherRows(size_t row, int n, const int32_t* idx, const float* table,
                          float* out) override {
#pragma omp parallel for num_threads(threads_) schedule(static) if (row * n > kParallelMin)
    for (int i = 0; i < n; ++i) {
      std::memcpy(out + i * row, table + static_cast<size_t>(idx[i]) * row, row * sizeof(float));
    }
    return absl::OkStatus();
  }

  absl::Status GatherLabels(int n, const int32_t* idx, const int32_t* table,
                            int32_t* out) override {
    for (int i = 0; i < n; ++i) out[i] = table[idx[i]];
    return absl::OkStatus();
  }

  absl::Status Copy(size_t n, const float* x, float* y) override {
    ParallelFor(threads_, n,
                [&](size_t b, size_t e) { std::memcpy(y + b, x + b, (e - b) * sizeof(float)); });
    return absl::OkStatus();
  }

  absl::Status Add(size_t n, const float* a, const float* b, float* y) override {
    ParallelFor(threads_, n, [&](size_t lo, size_t hi) { AddRange(a, b, y, lo, hi); });
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
  absl::Status MaskedScale(int rows, int cols, const uint8_t* mask, float keep, const float* x,
                           float* y) override {
    cpu::MaskedScale(threads_, rows, cols, mask, keep, x, y);
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
    ParallelFor(threads_, n, [&](size_t b, size_t e) { DivideRange(d, x, b, e); });
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

  const int threads_;
  const bool onednn_gemm_;
  std::unique_ptr<cpu::DnnlConv> conv_;  // null: kOpenBlas
};

}  // namespace

int DefaultCpuThreads() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::unique_ptr<Backend> NewCpuBackend(int threads, CpuKernels kernels) {
  return std::make_unique<CpuBackend>(std::max(1, threads), kernels);
}

}  // namespace lockstep
