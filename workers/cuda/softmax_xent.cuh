// Softmax cross-entropy on integer labels (see Backend::SoftmaxCrossEntropy): one thread
// per sample (or per position of a sequence), in the CPU backend's order of operations.
// Rows are short (10 classes, 256 for a byte-level sequence model); expf/logf may differ
// from glibc's in the last bit, so loss and dlogits agree with the CPU backend to float
// rounding, and `correct` exactly.
#ifndef LOCKSTEP_WORKERS_CUDA_SOFTMAX_XENT_CUH_
#define LOCKSTEP_WORKERS_CUDA_SOFTMAX_XENT_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace lockstep::cuda {

cudaError_t SoftmaxCrossEntropy(int b, int classes, const float* logits, const int32_t* labels,
                                float* loss, float* dlogits, float* correct, cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_SOFTMAX_XENT_CUH_
