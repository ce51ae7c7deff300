// CudaBackend's convolutions: cuDNN (cudnn_conv.h) for the geometries it takes, else
// Backend's im2col + cuBLAS. A layer's scratch fits either path, so that a geometry cuDNN
// refuses at another batch (the last, smaller evaluation batch) still has the patches'.
// Built only with cuDNN (LOCKSTEP_HAVE_CUDNN).
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

}  // namespace lockstep
