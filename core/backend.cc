// Backend: the compute primitives one training step needs, on memory the backend owns (host memory
// for the CPU backend, device memory for CUDA). Contract: backend.h.
#include "core/backend.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/exact_sum.h"
#include "core/status_macros.h"

namespace lockstep {

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    Reset();
    data_ = o.data_;
    bytes_ = o.bytes_;
    free_ = std::move(o.free_);
    o.data_ = nullptr;
    o.bytes_ = 0;
    o.free_ = nullptr;
  }
  return *this;
}

namespace {

// The default convolutions' scratch: the patches (b * oh * ow, kh * kw * c).
size_t PatchFloats(const ConvGeometry& g) {
  return static_cast<size_t>(g.b) * g.oh() * g.ow() * g.kh * g.kw * g.c;
}

}  // namespace

size_t Backend::ConvScratchBytes(const ConvGeometry& g) { return PatchFloats(g) * sizeof(float); }

absl::Status Backend::ConvForward(const ConvGeometry& g, const float* x, const float* w,
                                  const float* bias, float* y, void* scratch) {
  float* cols = static_cast<float*>(scratch);
  const int rows = g.b * g.oh() * g.ow();
  RETURN_IF_ERROR(Im2Col(g, x, cols));
  RETURN_IF_ERROR(Gemm(false, false, rows, g.f, g.kh * g.kw * g.c, 1.0f, cols, w, 0.0f, y));
  if (bias != nullptr) RETURN_IF_ERROR(BiasAdd(rows, g.f, bias, y));
  return absl::OkStatus();
}

absl::Status Backend::DenseForward(int rows, int out, int in, const float* x, const float* w,
                                   const float* bias, bool relu, float* y) {
  RETURN_IF_ERROR(Gemm(false, false, rows, out, in, 1.0f, x, w, 0.0f, y));
  if (bias != nullptr) RETURN_IF_ERROR(BiasAdd(rows, out, bias, y));
  if (relu) return Relu(static_cast<size_t>(rows) * out, y);
  return absl::OkStatus();
}

absl::Status Backend::ConvForwardRelu(const ConvGeometry& g, const float* x, const float* w,
                                      const float* bias, float* y, void* scratch) {
  RETURN_IF_ERROR(ConvForward(g, x, w, bias, y, scratch));
  return Relu(static_cast<size_t>(g.b) * g.oh() * g.ow() * g.f, y);
}

absl::Status Backend::ConvBackwardWeights(const ConvGeometry& g, const float* x, const float* dy,
                                          float* dw, float* dbias, void* scratch) {
  // x is already in scratch as the patches ConvForward left there.
  const float* cols = static_cast<const float*>(scratch);
  const int rows = g.b * g.oh() * g.ow();
  RETURN_IF_ERROR(Gemm(true, false, g.kh * g.kw * g.c, g.f, rows, 1.0f, cols, dy, 0.0f, dw));
  if (dbias != nullptr) RETURN_IF_ERROR(BiasGrad(rows, g.f, dy, dbias));
  return absl::OkStatus();
}

absl::Status Backend::ConvBackwardData(const ConvGeometry& g, const float* w, const float* dy,
                                       float* dx, void* scratch) {
  float* dcols = static_cast<float*>(scratch);  // the patches are no longer needed
  const int rows = g.b * g.oh() * g.ow();
  RETURN_IF_ERROR(Gemm(false, true, rows, g.kh * g.kw * g.c, g.f, 1.0f, dy, w, 0.0f, dcols));
  return Col2Im(g, dcols, dx);
}

void Buffer::Reset() {
  if (data_ != nullptr && free_) free_(data_);
  data_ = nullptr;
  bytes_ = 0;
  free_ = nullptr;
}

namespace {

absl::Status NoSequenceLayers(const Backend& b, const char* kernel) {
  return absl::UnimplementedError(
      absl::StrCat(b.Name(), ": ", kernel,
                   ": no sequence layers on this backend (the CPU and CUDA backends have them)"));
}

}  // namespace

absl::Status Backend::Embed(int, int, const float*, const float*, float*) {
  return NoSequenceLayers(*this, "Embed");
}
absl::Status Backend::EmbedBackward(int, int, int, const float*, const float*, float*) {
  return NoSequenceLayers(*this, "EmbedBackward");
}
absl::Status Backend::AddRows(int, int, const float*, const float*, float*) {
  return NoSequenceLayers(*this, "AddRows");
}
absl::Status Backend::GemmStrided(bool, bool, int, int, int, float, const float*, int, int64_t,
                                  const float*, int, int64_t, float, float*, int, int64_t, int) {
  return NoSequenceLayers(*this, "GemmStrided");
}
absl::Status Backend::AttentionSoftmax(int, int, bool, float*) {
  return NoSequenceLayers(*this, "AttentionSoftmax");
}
absl::Status Backend::SoftmaxBackward(int, int, const float*, float*) {
  return NoSequenceLayers(*this, "SoftmaxBackward");
}
absl::Status Backend::MaskedScale(int, int, const uint8_t*, float, const float*, float*) {
  return NoSequenceLayers(*this, "MaskedScale");
}
absl::Status Backend::ClassToken(int, int, int, const float*, const float*, float*) {
  return NoSequenceLayers(*this, "ClassToken");
}
absl::Status Backend::ClassTokenBackward(int, int, int, const float*, float*, float*) {
  return NoSequenceLayers(*this, "ClassTokenBackward");
}
absl::Status Backend::SequencePool(bool, int, int, int, const float*, float*) {
  return NoSequenceLayers(*this, "SequencePool");
}
absl::Status Backend::SequencePoolBackward(bool, int, int, int, const float*, float*) {
  return NoSequenceLayers(*this, "SequencePoolBackward");
}

namespace {

absl::Status NoBf16(const Backend& b, const char* kernel) {
  return absl::UnimplementedError(
      absl::StrCat(b.Name(), ": ", kernel,
                   ": no bfloat16 kernels on this backend (the CPU and CUDA backends have them)"));
}

}  // namespace

absl::Status Backend::Bf16Support() {
  return absl::InvalidArgumentError(absl::StrCat(
      "model.dtype: bfloat16 needs bfloat16 kernels; the ", Name(), " backend has none"));
}
absl::Status Backend::ToBf16(size_t, const float*, Bf16*) { return NoBf16(*this, "ToBf16"); }
absl::Status Backend::AddRowsBf16(int, int, const float*, const float*, float*, Bf16*) {
  return NoBf16(*this, "AddRowsBf16");
}
absl::Status Backend::GemmBf16(bool, bool, int, int, int, float, const Bf16*, const Bf16*, float,
                               float*) {
  return NoBf16(*this, "GemmBf16");
}
absl::Status Backend::GemmStridedBf16(bool, bool, int, int, int, float, const Bf16*, int, int64_t,
                                      const Bf16*, int, int64_t, float, float*, int, int64_t, int) {
  return NoBf16(*this, "GemmStridedBf16");
}
absl::Status Backend::BiasGradBf16(int rows, int cols, const float* dy, float* db, Bf16* dy16) {
  RETURN_IF_ERROR(ToBf16(static_cast<size_t>(rows) * cols, dy, dy16));
  return db == nullptr ? absl::OkStatus() : BiasGrad(rows, cols, dy, db);
}
absl::Status Backend::GemmHeadsBf16(bool ta, bool tb, int m, int n, int k, float alpha,
                                    HeadsOperand<const Bf16> a, HeadsOperand<const Bf16> b,
                                    float beta, HeadsOperand<float> c, int count, int heads) {
  for (int j = 0; j < heads; ++j) {
    RETURN_IF_ERROR(GemmStridedBf16(ta, tb, m, n, k, alpha, a.p + j * a.head, a.ld, a.stride,
                                    b.p + j * b.head, b.ld, b.stride, beta, c.p + j * c.head, c.ld,
                                    c.stride, count));
  }
  return absl::OkStatus();
}
absl::Status Backend::Im2ColBf16(const ConvGeometry&, const Bf16*, Bf16*) {
  return NoBf16(*this, "Im2ColBf16");
}
absl::Status Backend::ActivateBf16(Activation, size_t, const float*, float*, Bf16*) {
  return NoBf16(*this, "ActivateBf16");
}
absl::Status Backend::ReluBf16(size_t, float*, Bf16*) { return NoBf16(*this, "ReluBf16"); }

namespace {

// y rounded to bfloat16 (rows x cols), then relu'd where asked; y16 as the contract says.
absl::Status RoundRelu(Backend& be, int rows, int cols, bool relu, float* y, Bf16* y16) {
  RETURN_IF_ERROR(be.AddRowsBf16(rows, cols, y, nullptr, y, relu ? nullptr : y16));
  if (!relu) return absl::OkStatus();
  const size_t n = static_cast<size_t>(rows) * cols;
  return y16 != nullptr ? be.ReluBf16(n, y, y16) : be.Relu(n, y);
}

}  // namespace

absl::Status Backend::BatchNormApplyBf16(int rows, int cols, float epsilon, const float* x,
                                         const float* mean, const float* var, const float* scale,
                                         const float* bias, bool relu, float* y, Bf16* y16) {
  RETURN_IF_ERROR(BatchNormApply(rows, cols, epsilon, x, mean, var, scale, bias, y));
  return RoundRelu(*this, rows, cols, relu, y, y16);
}
absl::Status Backend::BatchNormMomentsBf16(int, int, const float*, float*, float*) {
  return NoBf16(*this, "BatchNormMomentsBf16");
}
absl::Status Backend::BatchNormBackwardReduceBf16(int, int, float, const float*, const float*,
                                                  const float*, const float*, float*, float*,
                                                  float*, float*) {
  return NoBf16(*this, "BatchNormBackwardReduceBf16");
}
absl::Status Backend::BatchNormBackwardApplyBf16(int, int, float, int, const float*, const float*,
                                                 const float*, const float*, const float*,
                                                 const float*, Bf16*) {
  return NoBf16(*this, "BatchNormBackwardApplyBf16");
}
absl::Status Backend::AddBf16(int rows, int cols, const float* a, const float* b, bool relu,
                              float* y, Bf16* y16) {
  RETURN_IF_ERROR(Add(static_cast<size_t>(rows) * cols, a, b, y));
  return RoundRelu(*this, rows, cols, relu, y, y16);
}
absl::Status Backend::DropoutBf16(int rows, int cols, float keep, const rng::Key* key,
                                  rng::Impl impl, const float* x, float* y, uint8_t* mask,
                                  Bf16* y16) {
  // The mask as float32 dropout draws it (the values of this first y are discarded).
  const size_t n = static_cast<size_t>(rows) * cols;
  RETURN_IF_ERROR(Dropout(n, keep, key, impl, x, y, mask));
  RETURN_IF_ERROR(DropoutBackward(n, RoundBf16(keep), mask, x, y));
  return AddRowsBf16(rows, cols, y, nullptr, y, y16);
}
absl::Status Backend::DivideBf16(size_t n, float d, float* x, Bf16* y16) {
  RETURN_IF_ERROR(Divide(n, d, x));
  return ToBf16(n, x, y16);
}
absl::Status Backend::AvgPoolBf16(const ConvGeometry&, bool, const float*, float*) {
  return NoBf16(*this, "AvgPoolBf16");
}
absl::Status Backend::AttentionSoftmaxBf16(int, int, bool, float*) {
  return NoBf16(*this, "AttentionSoftmaxBf16");
}
absl::Status Backend::MaskedScaleBf16(int rows, int cols, const uint8_t* mask, float scale,
                                      const float* x, float* y, Bf16* y16) {
  RETURN_IF_ERROR(MaskedScale(rows, cols, mask, scale, x, y));
  return AddRowsBf16(rows, cols, y, nullptr, y, y16);
}
absl::Status Backend::SoftmaxBackwardBf16(int rows, int t, bool, const float* p,
                                          const uint8_t* mask, float scale, float* dp, Bf16* dp16) {
  if (mask != nullptr) RETURN_IF_ERROR(MaskedScale(rows / t, t * t, mask, scale, dp, dp));
  RETURN_IF_ERROR(SoftmaxBackward(rows, t, p, dp));
  return ToBf16(static_cast<size_t>(rows) * t, dp, dp16);
}
bool Backend::FusedAttentionTakes(const AttentionShape&) { return false; }
absl::Status Backend::FusedAttentionBf16(const AttentionShape&, const Bf16*, const Bf16*,
                                         const Bf16*, Bf16*, float*) {
  return NoBf16(*this, "FusedAttentionBf16");
}
absl::Status Backend::FusedAttentionBackwardBf16(const AttentionShape&, const Bf16*, const Bf16*,
                                                 const Bf16*, const Bf16*, const Bf16*,
                                                 const float*, Bf16*, Bf16*, Bf16*, float*, float*,
                                                 float*) {
  return NoBf16(*this, "FusedAttentionBackwardBf16");
}

// The bfloat16 convolutions' scratch: the bfloat16 patches, or backward-data's float32
// patch gradients, whichever is larger.
size_t Backend::ConvScratchBytesBf16(const ConvGeometry& g) {
  return PatchFloats(g) * sizeof(float);
}

absl::Status Backend::ConvForwardBf16(const ConvGeometry& g, const Bf16* x, const Bf16* w, float* y,
                                      void* scratch) {
  Bf16* cols = static_cast<Bf16*>(scratch);
  RETURN_IF_ERROR(Im2ColBf16(g, x, cols));
  return GemmBf16(false, false, g.b * g.oh() * g.ow(), g.f, g.kh * g.kw * g.c, 1.0f, cols, w, 0.0f,
                  y);
}

absl::Status Backend::ConvBackwardWeightsBf16(const ConvGeometry& g, const Bf16*, const Bf16* dy,
                                              float* dw, void* scratch) {
  // The patches ConvForwardBf16 left in scratch.
  const Bf16* cols = static_cast<const Bf16*>(scratch);
  return GemmBf16(true, false, g.kh * g.kw * g.c, g.f, g.b * g.oh() * g.ow(), 1.0f, cols, dy, 0.0f,
                  dw);
}

absl::Status Backend::ConvBackwardDataBf16(const ConvGeometry& g, const Bf16* w, const Bf16* dy,
                                           float* dx, void* scratch) {
  float* dcols = static_cast<float*>(scratch);
  RETURN_IF_ERROR(GemmBf16(false, true, g.b * g.oh() * g.ow(), g.kh * g.kw * g.c, g.f, 1.0f, dy, w,
                           0.0f, dcols));
  return Col2Im(g, dcols, dx);
}

absl::Status Backend::ApplyUpdate(const UpdateStep& u, size_t n, const UpdateScalars* s,
                                  double* norm_scratch, float* grads, float* slot0, float* slot1,
                                  float* params) {
  if (u.divisor != 1.0f) RETURN_IF_ERROR(Divide(n, u.divisor, grads));
  if (u.max_norm > 0) {
    double* sum_squares = norm_scratch + SumSquaresPartials(n);
    RETURN_IF_ERROR(SumSquares(n, grads, norm_scratch, sum_squares));
    RETURN_IF_ERROR(ClipByGlobalNorm(n, u.max_norm, sum_squares, grads));
  }
  if (u.adam) return AdamUpdate(n, s, grads, slot0, slot1, params);
  return SgdUpdate(n, s, u.momentum, u.nesterov, grads, slot0, params);
}

namespace {

absl::Status NeedsHostMemory(const Backend& b, const char* kernel) {
  if (b.host_memory()) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat(b.Name(), ": ", kernel, ": the host's exact-sum conversions need host memory"));
}

// True when block exponent e scales nothing (all zeros, or a non-finite contribution).
bool Unscaled(int64_t e) { return e == ExactSum::kZeroBlock || e == ExactSum::kNonFinite; }

}  // namespace

absl::Status Backend::ExactBlockExponents(size_t n, size_t block, const float* x, bool accumulate,
                                          int64_t* exponents) {
  RETURN_IF_ERROR(NeedsHostMemory(*this, "ExactBlockExponents"));
  const float* const local[] = {x};
  for (size_t b = 0; b * block < n; ++b) {
    const int64_t e = ExactSum::BlockExponent(local, b * block, std::min(n, (b + 1) * block));
    exponents[b] = accumulate ? std::max(exponents[b], e) : e;
  }
  return absl::OkStatus();
}

absl::Status Backend::ExactToFixed(size_t n, size_t block, int headroom, const int64_t* exponents,
                                   const float* x, bool accumulate, int64_t* fixed) {
  RETURN_IF_ERROR(NeedsHostMemory(*this, "ExactToFixed"));
  for (size_t b = 0; b * block < n; ++b) {
    const int64_t e = exponents[b];
    // x * 2^s is exact in double (24 significant bits times a power of two in range).
    const double scale = Unscaled(e) ? 0.0 : std::ldexp(1.0, static_cast<int>(62 - headroom - e));
    for (size_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
      const int64_t v = Unscaled(e) ? 0 : std::llrint(static_cast<double>(x[i]) * scale);
      fixed[i] = accumulate ? fixed[i] + v : v;
    }
  }
  return absl::OkStatus();
}

absl::Status Backend::ExactFromFixed(size_t n, size_t block, int headroom, const int64_t* exponents,
                                     const int64_t* fixed, float* out) {
  RETURN_IF_ERROR(NeedsHostMemory(*this, "ExactFromFixed"));
  for (size_t b = 0; b * block < n; ++b) {
    const int64_t e = exponents[b];
    const size_t end = std::min(n, (b + 1) * block);
    if (Unscaled(e)) {
      std::fill(out + b * block, out + end,
                e == ExactSum::kZeroBlock ? 0.0f : std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const double unscale = std::ldexp(1.0, static_cast<int>(e + headroom - 62));
    for (size_t i = b * block; i < end; ++i) {
      out[i] = static_cast<float>(static_cast<double>(static_cast<float>(fixed[i])) * unscale);
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep
