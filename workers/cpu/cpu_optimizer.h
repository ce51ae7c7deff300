// The CPU backend's optimizer kernels (Backend::SumSquares, ClipByGlobalNorm, SgdUpdate,
// AdamUpdate), elementwise over `threads` OpenMP threads; the same bits on any thread count.
#ifndef LOCKSTEP_WORKERS_CPU_CPU_OPTIMIZER_H_
#define LOCKSTEP_WORKERS_CPU_CPU_OPTIMIZER_H_

#include <cstddef>

#include "core/backend.h"

namespace lockstep::cpu {

// *out = the sum of x's n squares in Backend::SumSquares's order; `partials` is scratch.
void SumSquares(int threads, size_t n, const float* x, double* partials, double* out);
// x = x / norm * max_norm where norm = sqrt(sum_squares) >= max_norm (optax's clip).
void ClipByGlobalNorm(int threads, size_t n, float max_norm, double sum_squares, float* x);
void SgdUpdate(int threads, size_t n, const UpdateScalars& s, float momentum, bool nesterov,
               const float* g, float* trace, float* p);
void AdamUpdate(int threads, size_t n, const UpdateScalars& s, const float* g, float* mu, float* nu,
                float* p);

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_CPU_OPTIMIZER_H_
