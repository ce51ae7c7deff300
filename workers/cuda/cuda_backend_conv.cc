// CudaBackend's convolutions, float32 and bfloat16: cuDNN (cudnn_conv.h) for the
// geometries it takes, else Backend's im2col + cuBLAS (GemmBf16 for bfloat16). A layer's scratch
// fits either path, so that a geometry cuDNN refuses at another batch (the last, smaller evaluation
// batch) still has the patches'. Built only with cuDNN (LOCKSTEP_HAVE_CUDNN).
#include <algorithm>

#include "core/status_macros.h"
#include "workers/cuda/backend_launch.h"

namespace lockstep {

size_t CudaBackend::ConvScratchBytes(const ConvGeometry& g) {
  CudnnTakes(g);  // builds g's plans now, outside any capture
  return std::max(Backend::ConvScratchBytes(g), CudnnConvs::ScratchBytes(g));
}

absl::Status CudaBackend::ConvForward(const ConvGeometry& g, const float* x, const float* w,
                                      const float* bias, float* y, void* scratch) {
  if (!CudnnTakes(g)) return Backend::ConvForward(g, x, w, bias, y, scratch);
  RETURN_IF_ERROR(Activate());
  return Failed(cudnn_->Forward(g, x, w, bias, false, y, scratch, *this));
}

absl::Status CudaBackend::ConvForwardRelu(const ConvGeometry& g, const float* x, const float* w,
                                          const float* bias, float* y, void* scratch) {
  if (!CudnnTakes(g)) return Backend::ConvForwardRelu(g, x, w, bias, y, scratch);
  RETURN_IF_ERROR(Activate());
  return Failed(cudnn_->Forward(g, x, w, bias, true, y, scratch, *this));
}

absl::Status CudaBackend::ConvBackwardWeights(const ConvGeometry& g, const float* x,
                                              const float* dy, float* dw, float* dbias,
                                              void* scratch) {
  if (!CudnnTakes(g)) return Backend::ConvBackwardWeights(g, x, dy, dw, dbias, scratch);
  RETURN_IF_ERROR(Activate());
  RETURN_IF_ERROR(Failed(cudnn_->BackwardFilter(g, x, dy, dw, scratch)));
  if (dbias != nullptr) return BiasGrad(g.b * g.oh() * g.ow(), g.f, dy, dbias);
  return absl::OkStatus();
}

absl::Status CudaBackend::ConvBackwardData(const ConvGeometry& g, const float* w, const float* dy,
                                           float* dx, void* scratch) {
  if (!CudnnTakes(g)) return Backend::ConvBackwardData(g, w, dy, dx, scratch);
  RETURN_IF_ERROR(Activate());
  return Failed(cudnn_->BackwardData(g, w, dy, dx, scratch));
}

size_t CudaBackend::ConvScratchBytesBf16(const ConvGeometry& g) {
  CudnnTakes(g, nullptr, true);  // builds g's bfloat16 plans now, outside any capture
  return std::max(Backend::ConvScratchBytesBf16(g), CudnnConvs::ScratchBytes(g));
}

// Forward and both gradients take the same path for a geometry (cuDNN's answer is cached):
// the im2col path's kernel gradient reads the patches its forward pass left in scratch.
absl::Status CudaBackend::ConvForwardBf16(const ConvGeometry& g, const Bf16* x, const Bf16* w,
                                          float* y, void* scratch) {
  if (!CudnnTakes(g, nullptr, true)) return Backend::ConvForwardBf16(g, x, w, y, scratch);
  RETURN_IF_ERROR(Activate());
  return Failed(cudnn_->ForwardBf16(g, x, w, y, scratch));
}

absl::Status CudaBackend::ConvBackwardWeightsBf16(const ConvGeometry& g, const Bf16* x,
                                                  const Bf16* dy, float* dw, void* scratch) {
  if (!CudnnTakes(g, nullptr, true)) {
    return Backend::ConvBackwardWeightsBf16(g, x, dy, dw, scratch);
  }
  RETURN_IF_ERROR(Activate());
  return Failed(cudnn_->BackwardFilterBf16(g, x, dy, dw, scratch));
}

absl::Status CudaBackend::ConvBackwardDataBf16(const ConvGeometry& g, const Bf16* w, const Bf16* dy,
                                               float* dx, void* scratch) {
  if (!CudnnTakes(g, nullptr, true)) return Backend::ConvBackwardDataBf16(g, w, dy, dx, scratch);
  RETURN_IF_ERROR(Activate());
  return Failed(cudnn_->BackwardDataBf16(g, w, dy, dx, scratch));
}

}  // namespace lockstep
