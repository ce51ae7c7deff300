// Convolution as im2col + GEMM: the patch gather and its adjoint, on NHWC activations,
// for any kernel, strides and padding (see Backend::Im2Col). Both are bitwise equal to
// the CPU backend: Col2Im is a gather that sums each pixel's patch entries in the CPU's
// order, one thread per output element, so no atomics and a deterministic result.
#ifndef LOCKSTEP_WORKERS_CUDA_CONV_CUH_
#define LOCKSTEP_WORKERS_CUDA_CONV_CUH_

#include <cuda_runtime.h>

#include "core/backend.h"

namespace lockstep::cuda {

// cols (b*oh*ow, kh*kw*c) from x (b, h, w, c).
cudaError_t Im2Col(const ConvGeometry& g, const float* x, float* cols, cudaStream_t stream);
// The same gather of bfloat16 activations (Backend::Im2ColBf16).
cudaError_t Im2Col(const ConvGeometry& g, const Bf16* x, Bf16* cols, cudaStream_t stream);
// dx (b, h, w, c) from dcols (b*oh*ow, kh*kw*c); overwrites dx.
cudaError_t Col2Im(const ConvGeometry& g, const float* dcols, float* dx, cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_CONV_CUH_
