// A vision transformer's token kernels: the class token put before the patches' tokens
// and its gradient, and pooling a sequence to one vector (x[:, 0] or the mean over the
// positions) and its gradient (see Backend::ClassToken and SequencePool). All are
// bitwise equal to the CPU backend: copies, and sums in the same order (each column's, in
// double from the first row, rounded once), with no atomics.
#ifndef LOCKSTEP_WORKERS_CUDA_TOKENS_CUH_
#define LOCKSTEP_WORKERS_CUDA_TOKENS_CUH_

#include <cuda_runtime.h>

namespace lockstep::cuda {

// y (b, t + 1, f): per sample cls (f), then its t rows of x (b, t, f).
cudaError_t ClassToken(int b, int t, int f, const float* cls, const float* x, float* y,
                       cudaStream_t stream);
// dx (b, t, f) = rows 1..t of dy per sample (skipped where dx is null); dcls (f) = the
// samples' row 0 summed in sample order.
cudaError_t ClassTokenBackward(int b, int t, int f, const float* dy, float* dx, float* dcls,
                               cudaStream_t stream);
// y (b, f) = the mean of x's t rows per sample (mean), or its row 0.
cudaError_t SequencePool(bool mean, int b, int t, int f, const float* x, float* y,
                         cudaStream_t stream);
// dx (b, t, f) = dy / float(t) in every row (mean), or dy in row 0 and zeros.
cudaError_t SequencePoolBackward(bool mean, int b, int t, int f, const float* dy, float* dx,
                                 cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_TOKENS_CUH_
