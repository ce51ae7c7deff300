// Arithmetic shared by the CPU backend and the CUDA kernels, so that both compute the same
// expressions in the same order: the activations' formulas (float32, as jax.nn writes
// them; the derivatives are those of the same expressions, as JAX's autodiff takes them)
// and which input elements a pooling window covers.
#ifndef LOCKSTEP_CORE_LAYER_MATH_H_
#define LOCKSTEP_CORE_LAYER_MATH_H_

#include <cmath>

#include "core/backend.h"
#include "core/bfloat16.h"
#include "core/host_device.h"

namespace lockstep::math {

inline constexpr float kSqrt2OverPi = 0.7978845608028654f;  // np.sqrt(2 / np.pi) in float32
inline constexpr float kGeluCubic = 0.044715f;
inline constexpr float kSqrtHalf = 0.70710678118654752f;      // np.sqrt(0.5) in float32
inline constexpr float kTwoOverSqrtPi = 1.1283791670955126f;  // erfc's derivative scale

LS_HOST_DEVICE inline float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// tanh as XLA computes it for jnp.tanh on CPU (Eigen's fast tanh): x itself where
// |x| < 4e-4, else an odd rational function of x clamped to +-7.90531 (where it is +-1 in
// float32), degree 13 over degree 6. Within 7 ulp of tanh (tanhf: 2), NaN in NaN out, free of
// branches and calls, so that loops over it vectorize (tanhf is a scalar libm call, and was
// most of a transformer step's time in gelu).
LS_HOST_DEVICE inline float Tanh(float x) {
  constexpr float kClamp = 7.90531110763549805f;
  const float c = x < -kClamp ? -kClamp : (x > kClamp ? kClamp : x);
  const float c2 = c * c;
  float p = -2.76076847742355e-16f;
  p = p * c2 + 2.00018790482477e-13f;
  p = p * c2 + -8.60467152213735e-11f;
  p = p * c2 + 5.12229709037114e-08f;
  p = p * c2 + 1.48572235717979e-05f;
  p = p * c2 + 6.37261928875436e-04f;
  p = p * c2 + 4.89352455891786e-03f;
  float q = 1.19825839466702e-06f;
  q = q * c2 + 1.18534705686654e-04f;
  q = q * c2 + 2.26843463243900e-03f;
  q = q * c2 + 4.89352518554385e-03f;
  return fabsf(x) < 0.0004f ? x : (p * c) / q;
}

LS_HOST_DEVICE inline float Activate(Activation a, float x) {
  switch (a) {
    case Activation::kGeluTanh: {
      const float cdf = 0.5f * (1.0f + Tanh(kSqrt2OverPi * (x + kGeluCubic * (x * (x * x)))));
      return x * cdf;
    }
    case Activation::kGeluErf:
      return 0.5f * x * erfcf(-x * kSqrtHalf);
    case Activation::kTanh:
      return Tanh(x);
    case Activation::kSigmoid:
      return Sigmoid(x);
    case Activation::kSilu:
      return x * Sigmoid(x);
  }
  return x;
}

// d activation(x) / dx.
LS_HOST_DEVICE inline float ActivationDerivative(Activation a, float x) {
  switch (a) {
    case Activation::kGeluTanh: {
      const float t = Tanh(kSqrt2OverPi * (x + kGeluCubic * (x * (x * x))));
      const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * (x * x));
      return 0.5f * (1.0f + t) + x * (0.5f * ((1.0f - t * t) * dinner));
    }
    case Activation::kGeluErf: {
      const float u = x * kSqrtHalf;
      return 0.5f * erfcf(-u) + 0.5f * x * (kTwoOverSqrtPi * expf(-(u * u)) * kSqrtHalf);
    }
    case Activation::kTanh: {
      const float y = Tanh(x);
      return 1.0f - y * y;
    }
    case Activation::kSigmoid: {
      const float y = Sigmoid(x);
      return y * (1.0f - y);
    }
    case Activation::kSilu: {
      const float s = Sigmoid(x);
      return s + x * (s * (1.0f - s));
    }
  }
  return 1.0f;
}

// The activations in bfloat16, as XLA computes jax.nn's formulas on a bfloat16 x: every
// op in float32 and its result rounded to bfloat16 (RoundBf16), the constants bfloat16
// too (np.sqrt(2 / np.pi).astype(x.dtype); a Python float's weak type takes x's dtype).
inline constexpr float kSqrt2OverPiBf16 = 0.796875f;      // bf16(sqrt(2 / pi))
inline constexpr float kGeluCubicBf16 = 0.044677734375f;  // bf16(0.044715)
inline constexpr float kSqrtHalfBf16 = 0.70703125f;       // bf16(sqrt(0.5))

// lax.logistic in bfloat16: 1 / (1 + exp(-x)), each op rounded.
LS_HOST_DEVICE inline float SigmoidBf16(float x) {
  return RoundBf16(1.0f / RoundBf16(1.0f + RoundBf16(expf(-x))));
}

LS_HOST_DEVICE inline float ActivateBf16(Activation a, float x) {
  switch (a) {
    case Activation::kGeluTanh: {  // x ** 3 is integer_pow: x * (x * x)
      const float cube = RoundBf16(x * RoundBf16(x * x));
      const float inner =
          RoundBf16(kSqrt2OverPiBf16 * RoundBf16(x + RoundBf16(kGeluCubicBf16 * cube)));
      const float cdf = RoundBf16(0.5f * RoundBf16(1.0f + RoundBf16(Tanh(inner))));
      return RoundBf16(x * cdf);
    }
    case Activation::kGeluErf:  // 0.5 * x * erfc(-x * sqrt_half); XLA's erfc upcasts its
      // input to float32 itself, and reads the product unrounded
      return RoundBf16(RoundBf16(0.5f * x) * RoundBf16(erfcf(-x * kSqrtHalfBf16)));
    case Activation::kTanh:
      return RoundBf16(Tanh(x));
    case Activation::kSigmoid:
      return SigmoidBf16(x);
    case Activation::kSilu:
      return RoundBf16(x * SigmoidBf16(x));
  }
  return x;
}

// jax.nn.softmax in bfloat16 of one row of `t` scores in place, as XLA computes it (see
// Backend::AttentionSoftmaxBf16): the first n are the row's, the rest masked (0 out).
LS_HOST_DEVICE inline void SoftmaxRowBf16(int n, int t, float* x) {
  for (int k = 0; k < n; ++k) x[k] = RoundBf16(x[k]);  // the scores' einsum rounds
  float mx = x[0];
  for (int k = 1; k < n; ++k) mx = x[k] > mx ? x[k] : mx;
  float sum = 0.0f;
  for (int k = 0; k < n; ++k) {
    x[k] = expf(RoundBf16(x[k] - mx));
    sum += x[k];
  }
  const float inv = 1.0f / RoundBf16(sum);
  for (int k = 0; k < n; ++k) x[k] = RoundBf16(RoundBf16(x[k]) * inv);
  for (int k = n; k < t; ++k) x[k] = 0.0f;
}

// Input rows (or columns) [begin, end).
struct Span {
  int begin, end;
};

// The input rows (or columns) that window `o` reads at `stride` with `pad` before,
// clipped to [0, n).
LS_HOST_DEVICE inline Span WindowSpan(int o, int stride, int pad, int k, int n) {
  const int start = o * stride - pad;
  return {start > 0 ? start : 0, start + k < n ? start + k : n};
}

// The windows [begin, end) among `out` that read input row (or column) i.
LS_HOST_DEVICE inline Span WindowsReading(int i, int stride, int pad, int k, int out) {
  const int low = i + pad - k + 1;
  const int first = low <= 0 ? 0 : (low + stride - 1) / stride;
  const int last = (i + pad) / stride + 1;
  return {first, last < out ? last : out};
}

// What avg_pool divides window (oy, ox) by: its size, or its elements inside the image.
LS_HOST_DEVICE inline float AvgDivisor(const ConvGeometry& g, bool count_include_pad, int oy,
                                       int ox) {
  if (count_include_pad) return static_cast<float>(g.kh * g.kw);
  const Span r = WindowSpan(oy, g.stride_h, g.pad_top, g.kh, g.h);
  const Span q = WindowSpan(ox, g.stride_w, g.pad_left, g.kw, g.w);
  return static_cast<float>((r.end - r.begin) * (q.end - q.begin));
}

// LayerNormRow in its parts, so that a kernel may interleave rows' sums (each row's in
// order): a value into its row's sums; then the row's mean, rstd and output from them.
LS_HOST_DEVICE inline void LayerNormAdd(float x, double* sum, double* sum_sq) {
  *sum += x;
  *sum_sq += double{x} * x;
}
// A row's output from its mean m and rstd rs.
LS_HOST_DEVICE inline void LayerNormApplyRow(int cols, const float* x, const float* scale,
                                             const float* bias, float m, float rs, float* y) {
  for (int c = 0; c < cols; ++c) {
    const float mul = scale != nullptr ? rs * scale[c] : rs;
    const float v = (x[c] - m) * mul;
    y[c] = bias != nullptr ? v + bias[c] : v;
  }
}
LS_HOST_DEVICE inline void LayerNormFinishRow(int cols, float epsilon, double sum, double sum_sq,
                                              const float* x, const float* scale, const float* bias,
                                              float* y, float* mean, float* rstd) {
  const double n = cols;
  const float m = static_cast<float>(sum / n);
  const float var = static_cast<float>(fmax(0.0, sum_sq / n - (sum / n) * (sum / n)));
  const float rs = 1.0f / sqrtf(var + epsilon);
  *mean = m;
  *rstd = rs;
  LayerNormApplyRow(cols, x, scale, bias, m, rs, y);
}

// LayerNormDxRow in its parts likewise: element c of a row into its sums, then the row.
LS_HOST_DEVICE inline void LayerNormDxAdd(int c, float x, const float* scale, float mean,
                                          float rstd, float dy, float* sum_g, float* sum_gx) {
  const float gc = scale != nullptr ? dy * scale[c] : dy;
  *sum_g += gc;
  *sum_gx += gc * ((x - mean) * rstd);
}
LS_HOST_DEVICE inline void LayerNormDxFinishRow(int cols, const float* x, const float* scale,
                                                float mean, float rstd, float sum_g, float sum_gx,
                                                const float* dy, float* dx) {
  const float n = static_cast<float>(cols);
  const float mean_g = sum_g / n, mean_gx = sum_gx / n;
  for (int c = 0; c < cols; ++c) {
    const float gc = scale != nullptr ? dy[c] * scale[c] : dy[c];
    const float xhat = (x[c] - mean) * rstd;
    dx[c] = rstd * ((gc - mean_g) - xhat * mean_gx);
  }
}

// Flax LayerNorm of one row of `cols` values (Backend::LayerNorm): saves the row's mean
// and rstd and writes y; scale and bias may be null. Flax's fast variance E[x^2] - E[x]^2
// cancels where the mean is large against the spread (after a sigmoid: ~0.5 +- a little),
// leaving the rounding of the float32 sums, amplified; in double (each x^2 exact) the
// variance is rounded once. In float32, a random model's gradients (golden_random.py) came
// out 3-5x further from float64's than XLA's (which contracts x * x + sum into an FMA);
// in double, 1.4-9x closer than XLA's.
LS_HOST_DEVICE inline void LayerNormRow(int cols, float epsilon, const float* x, const float* scale,
                                        const float* bias, float* y, float* mean, float* rstd) {
  double sum = 0.0, sum_sq = 0.0;
  for (int c = 0; c < cols; ++c) LayerNormAdd(x[c], &sum, &sum_sq);
  LayerNormFinishRow(cols, epsilon, sum, sum_sq, x, scale, bias, y, mean, rstd);
}

// Its input gradient for one row: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with
// g = dy * scale (scale may be null).
LS_HOST_DEVICE inline void LayerNormDxRow(int cols, const float* x, const float* scale, float mean,
                                          float rstd, const float* dy, float* dx) {
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int c = 0; c < cols; ++c) {
    LayerNormDxAdd(c, x[c], scale, mean, rstd, dy[c], &sum_g, &sum_gx);
  }
  LayerNormDxFinishRow(cols, x, scale, mean, rstd, sum_g, sum_gx, dy, dx);
}

}  // namespace lockstep::math

#endif  // LOCKSTEP_CORE_LAYER_MATH_H_
