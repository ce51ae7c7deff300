// A convolution kernel between Lockstep's HWIO layout (kh, kw, c, f) and cuDNN's KRSC
// (f, kh, kw, c), the filter layout of its NHWC engines (cudnn_conv.cc). Pure copies.
#ifndef LOCKSTEP_WORKERS_CUDA_CONV_LAYOUT_CUH_
#define LOCKSTEP_WORKERS_CUDA_CONV_LAYOUT_CUH_

#include <cuda_runtime.h>

#include "core/bfloat16.h"

namespace lockstep::cuda {

// krsc[((k * kh + r) * kw + s) * c + i] = hwio[((r * kw + s) * c + i) * f + k].
cudaError_t HwioToKrsc(int kh, int kw, int c, int f, const float* hwio, float* krsc,
                       cudaStream_t stream);
// The same for a bfloat16 kernel (the operand of cuDNN's bfloat16 convolutions).
cudaError_t HwioToKrsc(int kh, int kw, int c, int f, const Bf16* hwio, Bf16* krsc,
                       cudaStream_t stream);
// The inverse.
cudaError_t KrscToHwio(int kh, int kw, int c, int f, const float* krsc, float* hwio,
                       cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_CONV_LAYOUT_CUH_
