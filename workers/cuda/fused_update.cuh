// The optimizer step fused into one kernel over every parameter (Backend::ApplyUpdate):
// pmean's division, clip_by_global_norm's scaling and the sgd or adam/adamw update in one
// pass, bitwise the kernels it replaces (Divide, ClipByGlobalNorm, SgdUpdate/AdamUpdate).
#ifndef LOCKSTEP_WORKERS_CUDA_FUSED_UPDATE_CUH_
#define LOCKSTEP_WORKERS_CUDA_FUSED_UPDATE_CUH_

#include <cuda_runtime.h>

#include <cstddef>

#include "core/backend.h"

namespace lockstep::cuda {

// Per parameter: g = grads / u.divisor (unless 1); with sum_squares (the squared norm of
// those g, in device memory; null: no clipping) g scaled as ClipByGlobalNorm with
// u.max_norm; grads = g where either changed it; then the update u names. `s` is in device
// memory.
cudaError_t FusedUpdate(const Backend::UpdateStep& u, size_t n, const UpdateScalars* s,
                        const double* sum_squares, float* grads, float* slot0, float* slot1,
                        float* p, cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_FUSED_UPDATE_CUH_
