// The attention weights' softmax over rows of scores, with the optional causal mask, and
// the gradient through a softmax (see Backend::AttentionSoftmax, SoftmaxBackward). One
// thread per row, in the CPU backend's order of operations (workers/cpu/cpu_sequence.cc):
// SoftmaxBackward is bitwise equal to it; AttentionSoftmax differs only where CUDA's expf
// differs from glibc's (a few ulps), and is the same bits run to run.
#ifndef LOCKSTEP_WORKERS_CUDA_ATTENTION_SOFTMAX_CUH_
#define LOCKSTEP_WORKERS_CUDA_ATTENTION_SOFTMAX_CUH_

#include <cuda_runtime.h>

namespace lockstep::cuda {

// jax.nn.softmax over each row of s (rows, t) in place; with `causal`, row r's entries
// past r % t are first set to float32's lowest (they come out 0).
cudaError_t AttentionSoftmax(int rows, int t, bool causal, float* s, cudaStream_t stream);
// jax.nn.softmax in bfloat16 (Backend::AttentionSoftmaxBf16): math::SoftmaxRowBf16 per
// row, as the CPU backend; it too differs from the CPU only where expf does.
cudaError_t AttentionSoftmaxBf16(int rows, int t, bool causal, float* s, cudaStream_t stream);
// dp = p * (dp - sum(dp * p)) per row of (rows, cols), in place.
cudaError_t SoftmaxBackward(int rows, int cols, const float* p, float* dp, cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_ATTENTION_SOFTMAX_CUH_
