// optax's updates over the flat parameter array: sgd (with momentum, optionally
// Nesterov's) and adam/adamw, and clip_by_global_norm's norm and scaling. Bitwise equal to
// the CPU backend: the same float operations in the same order (the norm's sum in
// Backend::SumSquares's fixed order), with IEEE division and square root and no FMA
// contraction (--fmad=false).
#ifndef LOCKSTEP_WORKERS_CUDA_OPTIMIZER_CUH_
#define LOCKSTEP_WORKERS_CUDA_OPTIMIZER_CUH_

#include <cuda_runtime.h>

#include <cstddef>

#include "core/backend.h"

namespace lockstep::cuda {

// trace = g + momentum * trace (when trace is not null), the update that or, with
// nesterov, g + momentum * trace; p += -s->lr * update. `s` is in device memory.
cudaError_t SgdUpdate(size_t n, const UpdateScalars* s, float momentum, bool nesterov,
                      const float* g, float* trace, float* p, cudaStream_t stream);
// scale_by_adam, add_decayed_weights, scale(-lr); `s` is in device memory.
cudaError_t AdamUpdate(size_t n, const UpdateScalars* s, const float* g, float* mu, float* nu,
                       float* p, cudaStream_t stream);
// *out = sum of x[i]^2 in Backend::SumSquares's order; partials: SumSquaresPartials(n).
cudaError_t SumSquares(size_t n, const float* x, double* partials, double* out,
                       cudaStream_t stream);
// x = norm < max_norm ? x : x / norm * max_norm, norm = float(sqrt(*sum_squares)).
cudaError_t ClipByGlobalNorm(size_t n, float max_norm, const double* sum_squares, float* x,
                             cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_OPTIMIZER_CUH_
