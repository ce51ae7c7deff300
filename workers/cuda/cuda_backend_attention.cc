// CudaBackend's fused attention: cuDNN's SDPA (cudnn_attention.h) for the bfloat16
// attention layers whose shape it takes, unless the job turned it off
// (cuda.fused_attention: false). Built only with cuDNN (LOCKSTEP_HAVE_CUDNN).
#include "core/status_macros.h"
#include "workers/cuda/backend_launch.h"
#include "workers/cuda/bf16.cuh"

namespace lockstep {

absl::Status CudaBackend::SetFusedAttention(bool enabled) {
  fused_attention_ = enabled;
  return absl::OkStatus();
}

bool CudaBackend::FusedAttentionTakes(const AttentionShape& s) {
  if (!fused_attention_ || sdpa_ == nullptr || !Activate().ok()) return false;
  return sdpa_->Supports(s);
}

absl::Status CudaBackend::FusedAttentionBf16(const AttentionShape& s, const Bf16* q, const Bf16* k,
                                             const Bf16* v, Bf16* o, float* stats) {
  RETURN_IF_ERROR(Activate());
  return Failed(sdpa_->Forward(s, q, k, v, o, stats));
}

absl::Status CudaBackend::FusedAttentionBackwardBf16(const AttentionShape& s, const Bf16* q,
                                                     const Bf16* k, const Bf16* v, const Bf16* o,
                                                     const Bf16* d_o, const float* stats,
                                                     Bf16* dq16, Bf16* dk16, Bf16* dv16, float* dq,
                                                     float* dk, float* dv) {
  RETURN_IF_ERROR(Activate());
  RETURN_IF_ERROR(Failed(sdpa_->Backward(s, q, k, v, o, d_o, stats, dq16, dk16, dv16)));
  const size_t n = size_t(s.b) * s.t * s.h * s.d;
  RETURN_IF_ERROR(Check(cuda::FromBf16(n, dq16, dq, stream_), "FromBf16", __FILE__, __LINE__));
  RETURN_IF_ERROR(Check(cuda::FromBf16(n, dk16, dk, stream_), "FromBf16", __FILE__, __LINE__));
  return Check(cuda::FromBf16(n, dv16, dv, stream_), "FromBf16", __FILE__, __LINE__);
}

}  // namespace lockstep
