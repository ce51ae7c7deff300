// Backend: the compute primitives one training step needs, on memory the backend owns (host memory
// for the CPU backend, device memory for CUDA). Contract: backend.h.
#include "core/backend.h"

#include "absl/strings/str_cat.h"
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
absl::Status Backend::Im2ColBf16(const ConvGeometry&, const Bf16*, Bf16*) {
  return NoBf16(*this, "Im2ColBf16");
}
absl::Status Backend::ActivateBf16(Activation, size_t, const float*, float*, Bf16*) {
  return NoBf16(*this, "ActivateBf16");
}
absl::Status Backend::ReluBf16(size_t, float*, Bf16*) { return NoBf16(*this, "ReluBf16"); }
absl::Status Backend::AvgPoolBf16(const ConvGeometry&, bool, const float*, float*) {
  return NoBf16(*this, "AvgPoolBf16");
}
absl::Status Backend::AttentionSoftmaxBf16(int, int, bool, float*) {
  return NoBf16(*this, "AttentionSoftmaxBf16");
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

}  // namespace lockstep
