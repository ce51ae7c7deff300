// optax's update of one parameter, shared by the update kernels (optimizer.cu's and the
// fused one, fused_update.cu) so that both round alike: the CPU backend's float
// operations in its order, no FMA contraction (--fmad=false).
#ifndef LOCKSTEP_WORKERS_CUDA_UPDATE_MATH_CUH_
#define LOCKSTEP_WORKERS_CUDA_UPDATE_MATH_CUH_

#include <cuda_runtime.h>

#include <cstddef>

#include "core/backend.h"

namespace lockstep::cuda {

// sgd: trace = g + momentum * trace (when there is one), the update that or, with
// nesterov, g + momentum * trace; p += neg_lr * update.
__device__ inline void SgdElement(size_t i, float g, float neg_lr, float momentum, bool nesterov,
                                  float* trace, float* p) {
  float u = g;
  if (trace != nullptr) {
    const float t = trace[i] = g + momentum * trace[i];
    u = nesterov ? g + momentum * t : t;
  }
  p[i] = p[i] + neg_lr * u;
}

// scale_by_adam, add_decayed_weights (weight_decay != 0: adamw), scale(-lr).
__device__ inline void AdamElement(size_t i, float g, const UpdateScalars& s, float* mu, float* nu,
                                   float* p) {
  mu[i] = s.one_minus_b1 * g + s.b1 * mu[i];
  nu[i] = s.one_minus_b2 * (g * g) + s.b2 * nu[i];
  const float mu_hat = mu[i] / s.bias_correction1;
  const float nu_hat = nu[i] / s.bias_correction2;
  float u = mu_hat / (sqrtf(nu_hat) + s.eps);
  if (s.weight_decay != 0.0f) u = u + s.weight_decay * p[i];
  p[i] = p[i] + -s.lr * u;
}

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_UPDATE_MATH_CUH_
