// The CPU backend's optimizer kernels (Backend::SumSquares, ClipByGlobalNorm, SgdUpdate,
// AdamUpdate), elementwise over `threads` OpenMP threads. Contract: cpu_optimizer.h.
#include "workers/cpu/cpu_optimizer.h"

#include <algorithm>
#include <cmath>

#include "workers/cpu/multiversion.h"
#include "workers/cpu/parallel_min.h"

namespace lockstep::cpu {
namespace {

LS_MULTIVERSION void SgdRange(float neg_lr, float momentum, bool nesterov, const float* g,
                              float* trace, float* p, size_t begin, size_t end) {
  if (trace == nullptr) {
    for (size_t i = begin; i < end; ++i) p[i] = p[i] + neg_lr * g[i];
    return;
  }
  for (size_t i = begin; i < end; ++i) {
    trace[i] = g[i] + momentum * trace[i];
    const float u = nesterov ? g[i] + momentum * trace[i] : trace[i];
    p[i] = p[i] + neg_lr * u;
  }
}

// One chunk's sum in Backend::SumSquares's order: x[0, count), count <= kSumChunk, squared
// first for the float values (the first level), as they are for the chunks' sums.
inline double AddLanes(double* lane) {
  for (int s = kSumLanes / 2; s > 0; s /= 2) {
    for (int l = 0; l < s; ++l) lane[l] += lane[l + s];
  }
  return lane[0];
}

LS_MULTIVERSION double ChunkSumSquares(const float* x, size_t count) {
  double lane[kSumLanes] = {};
  for (size_t row = 0; row < count; row += kSumLanes) {
    const size_t width = std::min<size_t>(kSumLanes, count - row);
    for (size_t l = 0; l < width; ++l) {
      const double v = x[row + l];
      lane[l] += v * v;
    }
  }
  return AddLanes(lane);
}

LS_MULTIVERSION double ChunkSum(const double* x, size_t count) {
  double lane[kSumLanes] = {};
  for (size_t row = 0; row < count; row += kSumLanes) {
    const size_t width = std::min<size_t>(kSumLanes, count - row);
    for (size_t l = 0; l < width; ++l) lane[l] += x[row + l];
  }
  return AddLanes(lane);
}

LS_MULTIVERSION void ClipRange(float norm, float max_norm, float* x, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) x[i] = (x[i] / norm) * max_norm;
}

LS_MULTIVERSION void AdamRange(UpdateScalars s, const float* g, float* mu, float* nu, float* p,
                               size_t begin, size_t end) {
  const float neg_lr = -s.lr;
  for (size_t i = begin; i < end; ++i) {
    mu[i] = s.one_minus_b1 * g[i] + s.b1 * mu[i];
    nu[i] = s.one_minus_b2 * (g[i] * g[i]) + s.b2 * nu[i];
    const float mu_hat = mu[i] / s.bias_correction1;
    const float nu_hat = nu[i] / s.bias_correction2;
    float u = mu_hat / (std::sqrt(nu_hat) + s.eps);
    if (s.weight_decay != 0.0f) u = u + s.weight_decay * p[i];
    p[i] = p[i] + neg_lr * u;
  }
}

}  // namespace

void SumSquares(int threads, size_t n, const float* x, double* partials, double* out) {
  // Level by level: the chunk sums of the squares, then of those sums, into partials
  // until one is left, which goes to out.
  const double* level = nullptr;
  for (size_t count = n;;) {
    const size_t chunks = std::max<size_t>(1, (count + kSumChunk - 1) / kSumChunk);
    double* dst = chunks == 1 ? out : partials;
#pragma omp parallel for num_threads(threads) schedule(static) if (chunks >= 8)
    for (size_t c = 0; c < chunks; ++c) {
      const size_t first = c * kSumChunk, size = std::min<size_t>(kSumChunk, count - first);
      dst[c] = level == nullptr ? ChunkSumSquares(x + first, size) : ChunkSum(level + first, size);
    }
    if (chunks == 1) return;
    level = partials;
    partials += chunks;
    count = chunks;
  }
}

void ClipByGlobalNorm(int threads, size_t n, float max_norm, double sum_squares, float* x) {
  const float norm = static_cast<float>(std::sqrt(sum_squares));
  if (norm < max_norm) return;
  ParallelFor(threads, n, [&](size_t b, size_t e) { ClipRange(norm, max_norm, x, b, e); });
}

void SgdUpdate(int threads, size_t n, const UpdateScalars& s, float momentum, bool nesterov,
               const float* g, float* trace, float* p) {
  const float neg_lr = -s.lr;
  ParallelFor(threads, n,
              [&](size_t b, size_t e) { SgdRange(neg_lr, momentum, nesterov, g, trace, p, b, e); });
}

void AdamUpdate(int threads, size_t n, const UpdateScalars& s, const float* g, float* mu, float* nu,
                float* p) {
  ParallelFor(threads, n, [&](size_t b, size_t e) { AdamRange(s, g, mu, nu, p, b, e); });
}

}  // namespace lockstep::cpu
