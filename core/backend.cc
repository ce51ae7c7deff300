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

}  // namespace lockstep
