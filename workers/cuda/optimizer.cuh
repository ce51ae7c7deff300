// optax's updates over the flat parameter array: sgd (with momentum) and adam/adamw.
// Bitwise equal to the CPU backend: the same float operations in the same order, with
// IEEE division and square root and no FMA contraction (--fmad=false).
#ifndef LOCKSTEP_WORKERS_CUDA_OPTIMIZER_CUH_
#define LOCKSTEP_WORKERS_CUDA_OPTIMIZER_CUH_

#include <cuda_runtime.h>

#include <cstddef>

#include "core/backend.h"

namespace lockstep::cuda {

// trace = g + momentum * trace (when trace is not null); p += -lr * update.
cudaError_t SgdUpdate(size_t n, float lr, float momentum, const float* g, float* trace, float* p,
                      cudaStream_t stream);
// scale_by_adam, add_decayed_weights, scale(-lr); `s` is in device memory.
cudaError_t AdamUpdate(size_t n, const AdamScalars* s, const float* g, float* mu, float* nu,
                       float* p, cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_OPTIMIZER_CUH_
