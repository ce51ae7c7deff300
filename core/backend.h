// Backend: the compute primitives one training step needs, on memory the backend owns
// (host memory for the CPU backend, device memory for CUDA). StepExecutor (step.h)
// composes them into the step; backends only provide these kernels.
//
// All tensors are row-major float32 unless stated; activations are NHWC. Methods are
// asynchronous with respect to the host where the backend allows it (CUDA streams);
// Synchronize() waits and reports the first error. Not thread-safe: one thread drives
// a backend.
//
// Errors: every kernel returns a Status, never aborts the process. A kernel that fails
// when called (a oneDNN primitive, a CUDA launch or cuBLAS call refused) returns its
// error, naming the primitive: RESOURCE_EXHAUSTED for out of memory, INTERNAL otherwise;
// work that fails later, on the device, is reported by Synchronize(). While a graph is
// captured, a refused launch fails the capture instead (Capture's error) and the kernel
// returns OK. A caller stops at the first error: the buffers it wrote are undefined.
#ifndef LOCKSTEP_CORE_BACKEND_H_
#define LOCKSTEP_CORE_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/bfloat16.h"
#include "core/rng/threefry.h"

namespace lockstep {

// Memory in a backend's address space. Move-only; frees itself.
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* data, size_t bytes, std::function<void(void*)> free)
      : data_(data), bytes_(bytes), free_(std::move(free)) {}
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Reset(); }

  template <typename T = float>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  void Reset();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::function<void(void*)> free_;
};

// Convolution geometry: NHWC input (b, h, w, c), HWIO kernel (kh, kw, c, f), output
// (b, oh, ow, f) where oh = (h + pad_top + pad_bottom - kh) / stride_h + 1 and likewise ow.
struct ConvGeometry {
  int b, h, w, c, f, kh, kw;
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int oh() const { return (h + pad_top + pad_bottom - kh) / stride_h + 1; }
  int ow() const { return (w + pad_left + pad_right - kw) / stride_w + 1; }
};

// A multi-head attention layer's core: b samples of t positions, h heads of d features.
struct AttentionShape {
  int b = 0, t = 0, h = 0, d = 0;
  bool causal = false;
};

// Elementwise activations besides relu, as jax.nn computes them in float32.
enum class Activation {
  kGeluTanh,  // nn.gelu (approximate=True): x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
  kGeluErf,   // nn.gelu(approximate=False): 0.5 * x * erfc(-x / sqrt(2))
  kTanh,
  kSigmoid,  // 1 / (1 + exp(-x))
  kSilu,     // x * sigmoid(x)
};

// optax's per-step scalars, computed on the host in float32 (Optimizer::Scalars) and read
// by the update kernels from backend memory: the (scheduled) learning rate, which every
// optimizer reads, and adam/adamw's.
struct UpdateScalars {
  float lr, b1, b2, one_minus_b1, one_minus_b2, bias_correction1, bias_correction2, eps,
      weight_decay;  // 0 for adam
};

// The order in which every backend sums squares (SumSquares), whatever its threads, so
// that all give the same bits: the values are cut into chunks of kSumChunk; a chunk's sum
// is that of kSumLanes lanes, lane l adding (in double, from 0) the squares of the chunk's
// values l, l + kSumLanes, l + 2 * kSumLanes, ... in turn, after which the lanes are added
// pairwise, lane l += lane l + s for s = kSumLanes / 2, ..., 2, 1. The chunks' sums are
// then summed the same way (not squared), level after level, until one is left.
inline constexpr int kSumLanes = 256;
inline constexpr int kSumChunk = 16 * kSumLanes;

// The doubles SumSquares keeps between levels for n values: every level's sums but the
// last (the result).
inline size_t SumSquaresPartials(size_t n) {
  size_t total = 0;
  for (size_t count = (n + kSumChunk - 1) / kSumChunk; count > 1;
       count = (count + kSumChunk - 1) / kSumChunk) {
    total += count;
  }
  return total;
}

// The fixed row blocks of BatchNorm's column sums (see BatchNormMoments), and the floats
// their partial sums take for `cols` channels.
inline constexpr int kBatchNormBlocks = 64;
inline size_t BatchNormPartials(int cols) { return 2 * size_t(kBatchNormBlocks) * cols; }

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string Name() const = 0;

  // Memory. Allocate zero-fills.
  virtual absl::StatusOr<Buffer> Allocate(size_t bytes) = 0;
  // A buffer holding a copy of `bytes` of host memory. The CPU backend may instead alias
  // the host memory, which must then outlive the buffer.
  virtual absl::StatusOr<Buffer> Upload(const void* host, size_t bytes) = 0;
  virtual absl::Status CopyToDevice(void* dst, const void* host, size_t bytes) = 0;
  virtual absl::Status CopyToHost(void* host, const void* src, size_t bytes) = 0;
  virtual absl::Status Synchronize() = 0;
  // Whether buffers are host memory the caller may read and write directly, between the
  // backend's calls (the CPU backend); what core/exact_sum.h's host arithmetic needs.
  virtual bool host_memory() const { return false; }
  // Lets GEMMs use TF32 tensor cores (faster, about 1e-3 less exact). Backends without
  // them ignore it.
  virtual absl::Status SetTf32(bool enabled) { return absl::OkStatus(); }
  // Lets FusedAttentionTakes say yes where the backend has fused attention (spec
  // cuda.fused_attention; on by default). Backends without it ignore it.
  virtual absl::Status SetFusedAttention(bool enabled) { return absl::OkStatus(); }

  // c = alpha * op(a) * op(b) + beta * c with op(a) m x k, op(b) k x n, c m x n.
  virtual absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                            const float* a, const float* b, float beta, float* c) = 0;

  // cols (b*oh*ow, kh*kw*c): the zero-padded kh x kw patch each output pixel reads, in
  // HWI order, so that cols @ kernel(kh*kw*c, f) is the convolution.
  virtual absl::Status Im2Col(const ConvGeometry& g, const float* x, float* cols) = 0;
  // dx (b, h, w, c) = the adjoint of Im2Col applied to dcols (overwrites dx).
  virtual absl::Status Col2Im(const ConvGeometry& g, const float* dcols, float* dx) = 0;

  // Convolution, NHWC activations and HWIO kernel as in ConvGeometry. The default
  // implementations compose Im2Col, Gemm, Col2Im, BiasAdd and BiasGrad; a backend with
  // its own convolutions overrides all four. `scratch` is backend memory of
  // ConvScratchBytes(g) bytes (null when that is 0) that belongs to one conv layer and
  // also serves g with a smaller batch: ConvBackwardWeights must follow the ConvForward of
  // the same x with the same scratch, untouched in between (the default keeps the patches
  // there), and ConvBackwardData may then overwrite it.
  virtual size_t ConvScratchBytes(const ConvGeometry& g);
  // A dense layer: y (rows, out) = x (rows, in) . w (in, out), + bias (out) broadcast over
  // the rows unless bias is null, then with `relu` y = max(y, 0) (a ReLU that overwrites
  // the layer's output in place). The default runs Gemm, BiasAdd and Relu; a backend may
  // fuse them (the CUDA backend: one cuBLASLt GEMM with a bias and ReLU epilogue).
  virtual absl::Status DenseForward(int rows, int out, int in, const float* x, const float* w,
                                    const float* bias, bool relu, float* y);
  // y (b, oh, ow, f) = conv(x, w) (+ bias broadcast, unless bias is null).
  virtual absl::Status ConvForward(const ConvGeometry& g, const float* x, const float* w,
                                   const float* bias, float* y, void* scratch);
  // ConvForward, then y = max(y, 0): a conv whose output a ReLU overwrites in place. The
  // default runs ConvForward and Relu; a backend may fuse them (cuDNN's bias and ReLU
  // epilogue).
  virtual absl::Status ConvForwardRelu(const ConvGeometry& g, const float* x, const float* w,
                                       const float* bias, float* y, void* scratch);
  // dw (kh, kw, c, f) = the kernel's gradient given dy (b, oh, ow, f); dbias (f) = dy's
  // sums over (b, oh, ow) unless dbias is null. Both overwritten.
  virtual absl::Status ConvBackwardWeights(const ConvGeometry& g, const float* x, const float* dy,
                                           float* dw, float* dbias, void* scratch);
  // dx (b, h, w, c), overwritten: the input's gradient given dy.
  virtual absl::Status ConvBackwardData(const ConvGeometry& g, const float* w, const float* dy,
                                        float* dx, void* scratch);

  // y (rows, cols) += bias (cols) broadcast over rows.
  virtual absl::Status BiasAdd(int rows, int cols, const float* bias, float* y) = 0;
  // db (cols) = column sums of dy (rows, cols).
  virtual absl::Status BiasGrad(int rows, int cols, const float* dy, float* db) = 0;

  // x = max(x, 0) in place.
  virtual absl::Status Relu(size_t n, float* x) = 0;
  // dy = y > 0 ? dy : 0 in place, given the relu output y.
  virtual absl::Status ReluBackward(size_t n, const float* y, float* dy) = 0;

  // y = activation(x) elementwise (y != x).
  virtual absl::Status Activate(Activation a, size_t n, const float* x, float* y) = 0;
  // dy *= activation'(x) in place, given its input x (the derivative is recomputed from
  // x: a relu after the activation may have overwritten its output in place).
  virtual absl::Status ActivateBackward(Activation a, size_t n, const float* x, float* dy) = 0;

  // Pooling takes a ConvGeometry whose kernel is the window (kh, kw) and f == c:
  // x (b, h, w, c) -> y (b, oh, ow, c). Each window's elements are read in row-major order.
  // nn.avg_pool: the window's sum divided by kh * kw (count_include_pad) or by the number
  // of its elements inside the image.
  virtual absl::Status AvgPool(const ConvGeometry& g, bool count_include_pad, const float* x,
                               float* y) = 0;
  // dx (b, h, w, c), overwritten: each window's dy / count spread over its elements.
  virtual absl::Status AvgPoolBackward(const ConvGeometry& g, bool count_include_pad,
                                       const float* dy, float* dx) = 0;
  // nn.max_pool (padding reads as -inf).
  virtual absl::Status MaxPool(const ConvGeometry& g, const float* x, float* y) = 0;
  // dx (b, h, w, c), overwritten: each window's dy goes to the first (row-major) element
  // holding its maximum, as XLA's select-and-scatter routes it; sums in output order.
  virtual absl::Status MaxPoolBackward(const ConvGeometry& g, const float* x, const float* dy,
                                       float* dx) = 0;

  // Flax LayerNorm over each row of x (rows, cols): mean = E[x], var = max(0, E[x^2] -
  // mean^2) (use_fast_variance), rstd = rsqrt(var + epsilon), y = (x - mean) * (rstd *
  // scale) + bias; scale and bias may be null (use_scale, use_bias false). Saves mean and
  // rstd (rows) for the backward pass.
  virtual absl::Status LayerNorm(int rows, int cols, float epsilon, const float* x,
                                 const float* scale, const float* bias, float* y, float* mean,
                                 float* rstd) = 0;
  // Its gradients given dy: dx (may be null: not wanted), dscale and dbias (overwritten;
  // null where the layer has no such param).
  virtual absl::Status LayerNormBackward(int rows, int cols, const float* x, const float* scale,
                                         const float* mean, const float* rstd, const float* dy,
                                         float* dx, float* dscale, float* dbias) = 0;

  // Flax BatchNorm (use_fast_variance) on x (rows, cols): statistics per channel (column)
  // over every row and across the N replicas. A training step runs
  //   BatchNormMoments, [all-reduce sum of the 2 * cols moments, Divide by N],
  //   BatchNormVariance, BatchNormApply and BatchNormUpdateStats; and backward
  //   BatchNormBackwardReduce, [all-reduce sum of its 2 * cols sums], BatchNormBackwardApply;
  // evaluation only BatchNormApply with the running averages. Column sums are taken over
  // kBatchNormBlocks fixed row blocks, each in row order, added in block order, all in
  // double (each block's sum rounded to float once, the total once): the same bits
  // whatever the threads, and on every backend; `partials` (BatchNormPartials(cols)
  // floats of backend memory) holds the blocks' sums.
  // moments (2 * cols) = [column sums of x / rows, column sums of x * x / rows].
  virtual absl::Status BatchNormMoments(int rows, int cols, const float* x, float* partials,
                                        float* moments) = 0;
  // var (cols) = max(0, moments[cols + c] - moments[c]^2).
  virtual absl::Status BatchNormVariance(int cols, const float* moments, float* var) = 0;
  // y = (x - mean) * (rsqrt(var + epsilon) * scale) + bias per column; scale and bias may
  // be null (use_scale, use_bias false); y may be x.
  virtual absl::Status BatchNormApply(int rows, int cols, float epsilon, const float* x,
                                      const float* mean, const float* var, const float* scale,
                                      const float* bias, float* y) = 0;
  // The running averages: ra_mean = momentum * ra_mean + one_minus_momentum * mean, and
  // ra_var likewise with var (cols each).
  virtual absl::Status BatchNormUpdateStats(int cols, float momentum, float one_minus_momentum,
                                            const float* mean, const float* var, float* ra_mean,
                                            float* ra_var) = 0;
  // sums (2 * cols) = [column sums of dy, of dy * (x - mean)]; and from them this
  // replica's parameter gradients dbias = sums[c], dscale = sums[cols + c] *
  // rsqrt(var + epsilon) (overwritten; null where the layer has no such param).
  virtual absl::Status BatchNormBackwardReduce(int rows, int cols, float epsilon, const float* x,
                                               const float* dy, const float* mean, const float* var,
                                               float* partials, float* sums, float* dscale,
                                               float* dbias) = 0;
  // dx (overwritten) as JAX's autodiff of Flax's formula gives it on each of `replicas`
  // replicas of `rows` rows (math::BatchNormGrad), given the moments and `sums`, the
  // BatchNormBackwardReduce sums added over the replicas.
  virtual absl::Status BatchNormBackwardApply(int rows, int cols, float epsilon, int replicas,
                                              const float* x, const float* dy, const float* moments,
                                              const float* var, const float* scale,
                                              const float* sums, float* dx) = 0;

  // Flax Dropout: mask = bernoulli(*key, keep, (n,)) drawn with jax.random's bits, then
  // y = mask ? x / keep : 0. mask holds 0/1 bytes. `key` is in backend memory, so a
  // captured graph reads each step's key.
  virtual absl::Status Dropout(size_t n, float keep, const rng::Key* key, rng::Impl impl,
                               const float* x, float* y, uint8_t* mask) = 0;
  virtual absl::Status DropoutBackward(size_t n, float keep, const uint8_t* mask, const float* dy,
                                       float* dx) = 0;

  // Softmax cross-entropy on integer labels over logits (b, classes): per-sample loss,
  // dlogits = (softmax - onehot) / b (the gradient of the batch mean), and 1/0 in
  // correct where argmax (first maximum) equals the label.
  virtual absl::Status SoftmaxCrossEntropy(int b, int classes, const float* logits,
                                           const int32_t* labels, float* loss, float* dlogits,
                                           float* correct) = 0;

  // out (n, row) = table rows idx[0..n); idx is backend memory.
  virtual absl::Status GatherRows(size_t row, int n, const int32_t* idx, const float* table,
                                  float* out) = 0;
  virtual absl::Status GatherLabels(int n, const int32_t* idx, const int32_t* table,
                                    int32_t* out) = 0;

  // y = x (n floats, backend memory; the buffers do not overlap).
  virtual absl::Status Copy(size_t n, const float* x, float* y) = 0;
  // y = a + b elementwise (a residual connection's sum, and its gradients' where its input
  // branches); y may be a or b.
  virtual absl::Status Add(size_t n, const float* a, const float* b, float* y) = 0;

  // Sequence layers (nn.Embed, a position embedding, nn.MultiHeadDotProductAttention, a
  // vision transformer's class token and pooling).
  // The CPU and CUDA backends have them; the defaults return UNIMPLEMENTED naming the backend.
  //
  // out (n, features) = table rows ids[0..n) (float32 token ids, exact integers in
  // [0, num_embeddings) the caller has checked).
  virtual absl::Status Embed(int n, int features, const float* ids, const float* table, float* out);
  // dtable (num_embeddings, features), overwritten: zeros, then each dy row added to the
  // row of its id, in row order.
  virtual absl::Status EmbedBackward(int n, int features, int num_embeddings, const float* ids,
                                     const float* dy, float* dtable);
  // y (rows, cols) = x + bias (cols) broadcast over rows (y may be x).
  virtual absl::Status AddRows(int rows, int cols, const float* x, const float* bias, float* y);
  // `count` products c_i = alpha * op(a_i) * op(b_i) + beta * c_i, row-major with leading
  // dimensions lda, ldb, ldc, where a_i = a + i * stride_a and likewise b_i, c_i.
  virtual absl::Status GemmStrided(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                   const float* a, int lda, int64_t stride_a, const float* b,
                                   int ldb, int64_t stride_b, float beta, float* c, int ldc,
                                   int64_t stride_c, int count);
  // jax.nn.softmax over each row of s (rows, t) in place, rows being query positions
  // r % t; with `causal`, entries past the query position are first set to float32's
  // lowest (jnp.where(mask, s, finfo.min)), so they come out 0.
  virtual absl::Status AttentionSoftmax(int rows, int t, bool causal, float* s);
  // dp = p * (dp - sum(dp * p)) per row of (rows, cols), in place: the gradient through
  // the softmax that gave p.
  virtual absl::Status SoftmaxBackward(int rows, int cols, const float* p, float* dp);
  // Flax's broadcast attention dropout: y (rows, cols) = x * (mask[c] ? scale : 0), one 0/1
  // mask of `cols` shared by every row (y may be x); `scale` is Flax's multiplier
  // keep.astype(dtype) / keep_prob for a kept element (1 / keep in float32).
  virtual absl::Status MaskedScale(int rows, int cols, const uint8_t* mask, float scale,
                                   const float* x, float* y);
  // Vision transformers' class token: y (b, t + 1, f) holds, per sample, `cls` (f) and
  // then the sample's t rows of x (b, t, f).
  virtual absl::Status ClassToken(int b, int t, int f, const float* cls, const float* x, float* y);
  // Its gradients given dy (b, t + 1, f): dx (b, t, f) = each sample's rows 1..t of dy
  // (dx may be null: not wanted), dcls (f) = the sum over the samples of their row 0,
  // accumulated in double in sample order and rounded once (overwritten).
  virtual absl::Status ClassTokenBackward(int b, int t, int f, const float* dy, float* dx,
                                          float* dcls);
  // y (b, f) from x (b, t, f): with `mean` each sample's sum over its t rows (in double, in
  // row order, rounded once) divided by float(t), as jnp.mean(x, axis=1); else its row 0.
  virtual absl::Status SequencePool(bool mean, int b, int t, int f, const float* x, float* y);
  // dx (b, t, f), overwritten, given dy (b, f): dy / float(t) in every row (mean), or dy in
  // row 0 and zeros elsewhere.
  virtual absl::Status SequencePoolBackward(bool mean, int b, int t, int f, const float* dy,
                                            float* dx);

  // Mixed precision (a model's dtype bfloat16; docs/models.md#mixed-precision). Activations
  // stay in float32 buffers holding bfloat16 values, rounded (RoundBf16, round to nearest
  // even) at the points where XLA rounds Flax's bfloat16 ops; matmuls and convolutions
  // read Bf16 copies of their operands and accumulate in float32. The defaults return
  // UNIMPLEMENTED naming the backend (the CPU and CUDA backends have them; a backend
  // without them refuses a bfloat16 job in Bf16Support).
  //
  // OK where this backend runs the kernels below; otherwise INVALID_ARGUMENT saying what
  // it lacks (a CPU without avx512_bf16 or AMX, a GPU before compute capability 8.0).
  virtual absl::Status Bf16Support();
  // y = bf16(x) (n values).
  virtual absl::Status ToBf16(size_t n, const float* x, Bf16* y);
  // y (rows, cols) = bf16(bf16(x) + bf16(bias[c])), the bias broadcast over rows: a dense
  // or conv output (x: its float32 products) plus its bias as Flax adds them, each
  // rounded; bias null: y = bf16(x). y may be x. y16, unless null, receives y as Bf16 too
  // (the operand of the matmul that reads y next).
  virtual absl::Status AddRowsBf16(int rows, int cols, const float* x, const float* bias, float* y,
                                   Bf16* y16);
  // c = alpha * op(a) * op(b) + beta * c as Gemm, with bfloat16 operands, float32
  // products and sums.
  virtual absl::Status GemmBf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                const Bf16* a, const Bf16* b, float beta, float* c);
  // GemmStrided with bfloat16 operands (float32 sums).
  virtual absl::Status GemmStridedBf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                       const Bf16* a, int lda, int64_t stride_a, const Bf16* b,
                                       int ldb, int64_t stride_b, float beta, float* c, int ldc,
                                       int64_t stride_c, int count);
  // dy16 = bf16(dy) (rows x cols) and, unless db is null, db = BiasGrad's column sums of
  // dy: a bfloat16 layer's output gradient as its matmuls read it, and its bias's gradient.
  // The default is ToBf16 and BiasGrad; a backend may read dy once, with the same bits.
  virtual absl::Status BiasGradBf16(int rows, int cols, const float* dy, float* db, Bf16* dy16);
  // GemmStridedBf16 over a layer's heads too: count x heads products, product (i, j)
  // reading a.p + i * a.stride + j * a.head (leading dimension a.ld; b and c likewise):
  // attention's per-head products over every sample in one call. The default runs
  // GemmStridedBf16 once per head.
  template <typename T>
  struct HeadsOperand {
    T* p;
    int ld;
    int64_t stride, head;
  };
  virtual absl::Status GemmHeadsBf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                     HeadsOperand<const Bf16> a, HeadsOperand<const Bf16> b,
                                     float beta, HeadsOperand<float> c, int count, int heads);
  // Convolutions on bfloat16 operands (float32 sums and outputs), without bias (the caller
  // adds it with AddRowsBf16, and takes its gradient with BiasGrad). `scratch`:
  // ConvScratchBytesBf16(g) bytes, with ConvForward's contract; the defaults are im2col
  // (Im2ColBf16) and GemmBf16, the data gradient through Col2Im.
  virtual size_t ConvScratchBytesBf16(const ConvGeometry& g);
  virtual absl::Status ConvForwardBf16(const ConvGeometry& g, const Bf16* x, const Bf16* w,
                                       float* y, void* scratch);
  virtual absl::Status ConvBackwardWeightsBf16(const ConvGeometry& g, const Bf16* x, const Bf16* dy,
                                               float* dw, void* scratch);
  virtual absl::Status ConvBackwardDataBf16(const ConvGeometry& g, const Bf16* w, const Bf16* dy,
                                            float* dx, void* scratch);
  virtual absl::Status Im2ColBf16(const ConvGeometry& g, const Bf16* x, Bf16* cols);
  // The activation as jax.nn computes it in bfloat16: every jnp op of its formula rounded
  // (math::ActivateBf16). x holds bfloat16 values; y may be x; y16 as AddRowsBf16's.
  virtual absl::Status ActivateBf16(Activation a, size_t n, const float* x, float* y, Bf16* y16);
  // Relu in place, and x16 (not null) = bf16(x) after (exact: x holds bfloat16 values).
  virtual absl::Status ReluBf16(size_t n, float* x, Bf16* x16);
  // A bfloat16 BatchNorm's output: BatchNormApply's float32 result rounded once,
  // y = bf16(apply(x)); where relu, the ReLU after it fused in, y = max(y, 0) (exact). y16,
  // unless null, receives y as Bf16. The default is BatchNormApply, AddRowsBf16 and
  // ReluBf16 (or Relu) in turn; a backend may make them one pass, with the same bits.
  virtual absl::Status BatchNormApplyBf16(int rows, int cols, float epsilon, const float* x,
                                          const float* mean, const float* var, const float* scale,
                                          const float* bias, bool relu, float* y, Bf16* y16);
  // Whether this backend's bfloat16 BatchNorm reads a bfloat16 conv's float32 sums
  // unrounded and rounds them to bfloat16 itself as it reads them, so that the conv skips
  // its rounding pass (no bias; the BatchNorm its one reader: same bits). Where true,
  // BatchNormApplyBf16 rounds x as it reads it, and such a BatchNorm's other kernels are
  // the three below. The default (false) never calls them.
  virtual bool TakesUnroundedBatchNormInput() { return false; }
  // BatchNormMoments, BatchNormBackwardReduce and BatchNormBackwardApply on bf16(x); the
  // last writes dx only as bfloat16 (dx16, rounded as ToBf16 rounds): the conv's backward
  // reads its output gradient only so.
  virtual absl::Status BatchNormMomentsBf16(int rows, int cols, const float* x, float* partials,
                                            float* moments);
  virtual absl::Status BatchNormBackwardReduceBf16(int rows, int cols, float epsilon,
                                                   const float* x, const float* dy,
                                                   const float* mean, const float* var,
                                                   float* partials, float* sums, float* dscale,
                                                   float* dbias);
  virtual absl::Status BatchNormBackwardApplyBf16(int rows, int cols, float epsilon, int replicas,
                                                  const float* x, const float* dy,
                                                  const float* moments, const float* var,
                                                  const float* scale, const float* sums,
                                                  Bf16* dx16);
  // Flax Dropout in bfloat16 on rows x cols: Dropout's mask, then
  // y = mask ? bf16(x / bf16(keep)) : 0 (keep_prob taking x's dtype; x holds bfloat16
  // values); y16, unless null, receives y as Bf16 too (the operand of the matmul that reads
  // y next). The default is Dropout, DropoutBackward by bf16(keep) and AddRowsBf16 in
  // turn; a backend may make them one pass, with the same bits.
  virtual absl::Status DropoutBf16(int rows, int cols, float keep, const rng::Key* key,
                                   rng::Impl impl, const float* x, float* y, uint8_t* mask,
                                   Bf16* y16);
  // Attention's scaled bfloat16 queries: y16 = bf16(x / d) (n values; x holds bfloat16
  // values and is room the default uses: Divide, then ToBf16). A backend may write y16
  // alone, in one pass, with the same bits.
  virtual absl::Status DivideBf16(size_t n, float d, float* x, Bf16* y16);
  // A bfloat16 residual sum of rows x cols: y = bf16(a + b) (a, b bfloat16 values, added
  // in float32 and rounded once), relu and y16 as BatchNormApplyBf16's; y may be a or b.
  // The default is Add, AddRowsBf16 and ReluBf16 (or Relu) in turn.
  virtual absl::Status AddBf16(int rows, int cols, const float* a, const float* b, bool relu,
                               float* y, Bf16* y16);
  // nn.avg_pool in bfloat16: each window's sum accumulated in bfloat16 (every add
  // rounded, from 0, in XLA's order: cpu_bf16.cc), then bf16(sum / count); without
  // count_include_pad sum / count in float32 (Flax divides by float32 counts).
  virtual absl::Status AvgPoolBf16(const ConvGeometry& g, bool count_include_pad, const float* x,
                                   float* y);
  // jax.nn.softmax in bfloat16 as XLA computes it, in place (AttentionSoftmax's masking),
  // on s = the scores' float32 sums, rounded to bfloat16 first (the einsum's result):
  // d = bf16(s - max), e = exp(d), sum = bf16(float32 sum of e), p = bf16(bf16(e) * (1 / sum)).
  virtual absl::Status AttentionSoftmaxBf16(int rows, int t, bool causal, float* s);
  // Attention dropout's weights as the bfloat16 matmul reads them: y16 = bf16(MaskedScale's
  // y) (x holds bfloat16 weights). y: float32 room the default uses (MaskedScale, then
  // AddRowsBf16); a backend may write y16 alone, in one pass, with the same bits.
  virtual absl::Status MaskedScaleBf16(int rows, int cols, const uint8_t* mask, float scale,
                                       const float* x, float* y, Bf16* y16);
  // The gradient through a bfloat16 attention's softmax (and its dropout), as the bfloat16
  // matmuls read it: dp16 = bf16(SoftmaxBackward(p, dp')) where dp' = dp, or with `mask`
  // MaskedScale's dp over the [T, T] blocks of t rows of t (row r reads mask + (r % t) * t).
  // dp (rows x t) holds the gradient of p in, and is room the default uses (MaskedScale,
  // SoftmaxBackward, ToBf16 in turn); a backend may write dp16 alone, with the same bits.
  // `causal`: p is zero past each row's query position (AttentionSoftmaxBf16's causal
  // rows), so that a backend may sum p * dp' over row r's first r % t + 1 columns alone
  // (the rest add exact zeros: the same bits).
  virtual absl::Status SoftmaxBackwardBf16(int rows, int t, bool causal, const float* p,
                                           const uint8_t* mask, float scale, float* dp, Bf16* dp16);
  // Fused attention in bfloat16 (cuDNN's SDPA on CUDA), which an attention layer without
  // active dropout runs instead of its batched GEMMs and bfloat16 softmax where the backend
  // takes the shape: another rounding (the scores and softmax stay float32 inside), within
  // bfloat16 rounding of that sequence (docs/models.md#mixed-precision).
  //
  // Whether this backend runs s's fused attention, forward and backward, preparing what it
  // needs now (so the step asks when it sizes its workspace, outside any capture; the
  // answer for a shape never changes). The default: false.
  virtual bool FusedAttentionTakes(const AttentionShape& s);
  // o [b, T, H, D] = softmax(q k^T, causal) v per sample and head, on bfloat16 q (already
  // scaled), k and v [b, T, H, D]; stats [b, H, T] (float32) keeps what the backward needs.
  virtual absl::Status FusedAttentionBf16(const AttentionShape& s, const Bf16* q, const Bf16* k,
                                          const Bf16* v, Bf16* o, float* stats);
  // The gradients of q, k and v from do [b, T, H, D] and what the forward took and gave,
  // as bfloat16 (dq16, dk16, dv16) and as float32 (dq, dk, dv): the same values.
  virtual absl::Status FusedAttentionBackwardBf16(const AttentionShape& s, const Bf16* q,
                                                  const Bf16* k, const Bf16* v, const Bf16* o,
                                                  const Bf16* d_o, const float* stats, Bf16* dq16,
                                                  Bf16* dk16, Bf16* dv16, float* dq, float* dk,
                                                  float* dv);

  // x /= d elementwise (pmean's division after the all-reduce sum).
  virtual absl::Status Divide(size_t n, float d, float* x) = 0;

  // core/exact_sum.h's float <-> int64 fixed-point conversions on backend memory, for
  // DeviceExactSum (core/exact_sum_device.h: logical replicas on a backend whose memory is
  // not the host's). The n elements fall into blocks of `block`; `exponents` holds one
  // int64 per block, ExactSum::BlockExponent's values (kZeroBlock, kNonFinite included).
  // The defaults compute on the host, so only a backend with host_memory() uses them
  // (UNIMPLEMENTED otherwise); they are the reference a device's kernels are tested against.
  //
  // exponents[b] = BlockExponent of x's block b, or (accumulate) the max of that and
  // exponents[b]: the exponent of the blocks of every x so accumulated.
  virtual absl::Status ExactBlockExponents(size_t n, size_t block, const float* x, bool accumulate,
                                           int64_t* exponents);
  // fixed[i] = round(x[i] * 2^(62 - headroom - e)) to the nearest int64, ties to even, e =
  // exponents[i / block], or 0 where e is kZeroBlock or kNonFinite (step 2); with
  // `accumulate` added to fixed[i] instead (step 3's local sum).
  virtual absl::Status ExactToFixed(size_t n, size_t block, int headroom, const int64_t* exponents,
                                    const float* x, bool accumulate, int64_t* fixed);
  // out[i] = float(double(float(fixed[i])) * 2^(e + headroom - 62)) (step 4: one correctly
  // rounded conversion), +0 where e is kZeroBlock, NaN (0x7fc00000) where kNonFinite.
  virtual absl::Status ExactFromFixed(size_t n, size_t block, int headroom,
                                      const int64_t* exponents, const int64_t* fixed, float* out);

  // *out = the sum of x[i]^2 over [0, n), in double, in the order described at kSumLanes;
  // `partials` holds SumSquaresPartials(n) doubles. Both in backend memory.
  virtual absl::Status SumSquares(size_t n, const float* x, double* partials, double* out) = 0;
  // optax.clip_by_global_norm given the squared norm in backend memory: norm =
  // float(sqrt(*sum_squares)); x = norm < max_norm ? x : x / norm * max_norm.
  virtual absl::Status ClipByGlobalNorm(size_t n, float max_norm, const double* sum_squares,
                                        float* x) = 0;

  // optax.sgd: with a trace (momentum > 0), trace = g + momentum * trace and the update is
  // the trace, or with nesterov g + momentum * trace (the new one); without, g. Then
  // p += -s->lr * update. `s` is in backend memory (the lr may change every step).
  virtual absl::Status SgdUpdate(size_t n, const UpdateScalars* s, float momentum, bool nesterov,
                                 const float* g, float* trace, float* p) = 0;
  // optax.adam / adamw (scale_by_adam, add_decayed_weights, scale(-lr)); `s` is in
  // backend memory (it changes every step).
  virtual absl::Status AdamUpdate(size_t n, const UpdateScalars* s, const float* g, float* mu,
                                  float* nu, float* p) = 0;

  // One optimizer step over all n params (Optimizer::Apply), which a backend may fuse into
  // one pass (the CUDA backend: one kernel, besides the norm's sums when clipping):
  //   g = grads / divisor (pmean's division by the replicas; none when divisor is 1);
  //   with max_norm > 0, clip_by_global_norm (SumSquares of g into norm_scratch, which
  //   holds SumSquaresPartials(n) + 1 doubles, the sum last; then ClipByGlobalNorm);
  //   then SgdUpdate (slot0: the trace, or null) or AdamUpdate (slot0, slot1: mu, nu).
  // grads ends as the g the update used. The default runs those kernels in turn; a fused
  // one must give their bits.
  struct UpdateStep {
    bool adam = false;  // else sgd
    float divisor = 1.0f;
    float max_norm = 0.0f;  // 0: no clipping
    float momentum = 0.0f;  // sgd's
    bool nesterov = false;
  };
  virtual absl::Status ApplyUpdate(const UpdateStep& u, size_t n, const UpdateScalars* s,
                                   double* norm_scratch, float* grads, float* slot0, float* slot1,
                                   float* params);

  // Graphs: records the ops `body` issues into a replayable graph (CUDA graphs). Pointers
  // and sizes are frozen at capture; per-step values must come from backend memory.
  // Backends without graphs return UNIMPLEMENTED and callers run eagerly.
  class Graph {
   public:
    virtual ~Graph() = default;
    virtual absl::Status Launch() = 0;
  };
  virtual absl::StatusOr<std::unique_ptr<Graph>> Capture(
      const std::function<absl::Status()>& body) {
    return absl::UnimplementedError(Name() + ": no graph capture");
  }
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_BACKEND_H_
