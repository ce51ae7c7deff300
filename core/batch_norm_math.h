// Flax BatchNorm's per-channel arithmetic, shared by the CPU backend and the CUDA kernels
// so that both compute the same expressions in the same order (both without FMA
// contraction): the forward normalization, and the input gradient as JAX's autodiff of
// Flax's formula (flax/linen/normalization.py, use_fast_variance, stats pmean'd over the
// replicas) gives it.
#ifndef LOCKSTEP_CORE_BATCH_NORM_MATH_H_
#define LOCKSTEP_CORE_BATCH_NORM_MATH_H_

#include <cmath>

#include "core/host_device.h"

namespace lockstep::math {

// lax.rsqrt(var + epsilon).
LS_HOST_DEVICE inline float BatchNormRsqrt(float var, float epsilon) {
  return 1.0f / sqrtf(var + epsilon);
}

// Flax's `mul`: rsqrt(var + epsilon) * scale (scale null: use_scale false).
LS_HOST_DEVICE inline float BatchNormMul(float var, float epsilon, const float* scale, int c) {
  const float rs = BatchNormRsqrt(var, epsilon);
  return scale != nullptr ? rs * scale[c] : rs;
}

// Flax's _normalize: (x - mean) * mul, plus bias (null: use_bias false).
LS_HOST_DEVICE inline float BatchNormY(float x, float mean, float mul, const float* bias, int c) {
  const float y = (x - mean) * mul;
  return bias != nullptr ? y + bias[c] : y;
}

// var = jnp.maximum(0, mean2 - mean^2).
LS_HOST_DEVICE inline float BatchNormVariance(float mean, float mean2) {
  const float v = mean2 - mean * mean;
  return v > 0.0f ? v : 0.0f;
}

// One channel's input gradient as JAX's autodiff of Flax's forward gives it,
//   y = (x - mean) * mul + bias, mul = rsqrt(var + eps) * scale,
//   var = max(0, mean2 - mean^2), [mean, mean2] = pmean([sum(x), sum(x^2)] / rows),
// whose transposes give dx = dy * mul + g_mean + g_mean2 * 2x with
//   g_mean = (-sum_dy * mul - 2 * mean * d_v) / M, g_mean2 = d_v / M,
// M = replicas * rows, d_v the cotangent of var before the max. Written here as
//   dx = (dy - sum_dy / M) * mul + (x - mean) * (2 * d_v / M),
// the same sum without the cancellation of g_mean against g_mean2 * 2x (whose rounding
// would otherwise leak into the parameters before the norm, whose true gradient is 0).
// sum_dy and sum_dyc are the sums over all replicas of dy and dy * (x - mean) (each
// replica's cotangents of the pmean'd stats are psum'd by its transpose).
struct BatchNormGrad {
  float mean, mul, mean_dy, k;
};

LS_HOST_DEVICE inline BatchNormGrad BatchNormGradFor(float mean, float mean2, float var,
                                                     float epsilon, const float* scale, int c,
                                                     float sum_dy, float sum_dyc, int replicas,
                                                     int rows) {
  const float rs = BatchNormRsqrt(var, epsilon);
  const float mul = scale != nullptr ? rs * scale[c] : rs;
  const float d_rs = scale != nullptr ? sum_dyc * scale[c] : sum_dyc;
  // rsqrt'(x) = -0.5 * rsqrt(x) / x, as JAX's rule writes it.
  const float d_var = d_rs * (-0.5f * (rs / (var + epsilon)));
  // jnp.maximum(0, v)'s gradient: 1 where v > 0, 0.5 on a tie, 0 below.
  const float v = mean2 - mean * mean;
  const float d_v = v > 0.0f ? d_var : (v == 0.0f ? d_var * 0.5f : 0.0f);
  // pmean's transpose divides by the replicas, the local mean's by its rows.
  const float n = static_cast<float>(replicas), r = static_cast<float>(rows);
  return {mean, mul, sum_dy / n / r, (2.0f * d_v) / n / r};
}

LS_HOST_DEVICE inline float BatchNormDx(const BatchNormGrad& g, float x, float dy) {
  return (dy - g.mean_dy) * g.mul + (x - g.mean) * g.k;
}

}  // namespace lockstep::math

#endif  // LOCKSTEP_CORE_BATCH_NORM_MATH_H_
