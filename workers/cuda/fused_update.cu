// The optimizer step fused into one kernel over every parameter.
// Contract: fused_update.cuh.
#include "workers/cuda/fused_update.cuh"
#include "workers/cuda/launch.cuh"
#include "workers/cuda/update_math.cuh"

namespace lockstep::cuda {
namespace {

__global__ void FusedUpdateKernel(Backend::UpdateStep u, size_t n, const UpdateScalars* scalars,
                                  const double* sum_squares, float* grads, float* slot0,
                                  float* slot1, float* p) {
  const UpdateScalars s = *scalars;
  const float neg_lr = -s.lr;
  const bool divide = u.divisor != 1.0f;
  // ClipByGlobalNorm's: no change where norm < max_norm.
  const float norm = sum_squares != nullptr ? static_cast<float>(sqrt(*sum_squares)) : 0.0f;
  const bool clip = sum_squares != nullptr && !(norm < u.max_norm);
  for (size_t i = FirstIndex(); i < n; i += Stride()) {
    float g = grads[i];
    if (divide) g = g / u.divisor;
    if (clip) g = __fmul_rn(g / norm, u.max_norm);
    if (divide || clip) grads[i] = g;
    if (u.adam) {
      AdamElement(i, g, s, slot0, slot1, p);
    } else {
      SgdElement(i, g, neg_lr, u.momentum, u.nesterov, slot0, p);
    }
  }
}

}  // namespace

cudaError_t FusedUpdate(const Backend::UpdateStep& u, size_t n, const UpdateScalars* s,
                        const double* sum_squares, float* grads, float* slot0, float* slot1,
                        float* p, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FusedUpdateKernel<<<Blocks(n), kThreads, 0, stream>>>(u, n, s, sum_squares, grads, slot0, slot1,
                                                        p);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
