// Bias forward and backward over row-major (rows, cols) activations. BiasAdd and AddRows
// are bitwise equal to the CPU backend. BiasGrad is a deterministic column reduction spread
// over many blocks (a fixed summation tree, no atomics: bias_plan.h, whose host reference
// it equals bitwise); it sums in another order than the CPU backend's loop, so it agrees
// with it to float rounding, not bitwise.
#ifndef LOCKSTEP_WORKERS_CUDA_BIAS_CUH_
#define LOCKSTEP_WORKERS_CUDA_BIAS_CUH_

#include <cuda_runtime.h>

namespace lockstep::cuda {

// y (rows, cols) += bias (cols) broadcast over rows.
cudaError_t BiasAdd(int rows, int cols, const float* bias, float* y, cudaStream_t stream);
// y (rows, cols) = x + bias (cols) broadcast over rows (y may be x): a position embedding.
cudaError_t AddRows(int rows, int cols, const float* x, const float* bias, float* y,
                    cudaStream_t stream);
// db (cols) = column sums of dy (rows, cols). `scratch` is device memory of
// kBiasScratchFloats floats (bias_plan.h) that no other work on other streams uses.
cudaError_t BiasGrad(int rows, int cols, const float* dy, float* db, float* scratch,
                     cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_BIAS_CUH_
