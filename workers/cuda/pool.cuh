// 2x2 average pooling, stride 2, VALID, on NHWC activations, and its backward. Bitwise
// equal to the CPU backend: ((a + b) + c) + d, then a division by 4.
#ifndef LOCKSTEP_WORKERS_CUDA_POOL_CUH_
#define LOCKSTEP_WORKERS_CUDA_POOL_CUH_

#include <cuda_runtime.h>

namespace lockstep::cuda {

// y (b, h/2, w/2, c) from x (b, h, w, c).
cudaError_t AvgPool(int b, int h, int w, int c, const float* x, float* y, cudaStream_t stream);
// dx (b, h, w, c) = dy / 4 spread over each window; 0 in an odd last row or column.
cudaError_t AvgPoolBackward(int b, int h, int w, int c, const float* dy, float* dx,
                            cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_POOL_CUH_
