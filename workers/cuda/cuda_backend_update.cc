// CudaBackend::ApplyUpdate: the optimizer step in one kernel (fused_update.cu). Without
// clipping that is the whole update; with it, the norm's sums (SumSquares, over the
// divided gradients) come first.
#include "core/status_macros.h"
#include "workers/cuda/backend_launch.h"
#include "workers/cuda/elementwise.cuh"
#include "workers/cuda/fused_update.cuh"
#include "workers/cuda/optimizer.cuh"

namespace lockstep {

absl::Status CudaBackend::ApplyUpdate(const UpdateStep& u, size_t n, const UpdateScalars* s,
                                      double* norm_scratch, float* grads, float* slot0,
                                      float* slot1, float* params) {
  if (u.max_norm <= 0) {
    LS_LAUNCH(cuda::FusedUpdate(u, n, s, nullptr, grads, slot0, slot1, params, stream_));
  }
  // The norm is that of the divided gradients: divided first, then summed.
  UpdateStep clip = u;
  if (u.divisor != 1.0f) {
    RETURN_IF_ERROR(Divide(n, u.divisor, grads));
    clip.divisor = 1.0f;
  }
  double* sum_squares = norm_scratch + SumSquaresPartials(n);
  RETURN_IF_ERROR(SumSquares(n, grads, norm_scratch, sum_squares));
  LS_LAUNCH(cuda::FusedUpdate(clip, n, s, sum_squares, grads, slot0, slot1, params, stream_));
}

}  // namespace lockstep
