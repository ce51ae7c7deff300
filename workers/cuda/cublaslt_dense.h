// LtDense: a dense layer's forward pass, y = x . w + bias (then a ReLU's max(y, 0) where
// one follows in place), as one cuBLASLt GEMM whose epilogue adds the bias and applies
// the ReLU (one launch where cuBLAS's GEMM, the bias and the ReLU kernels took three).
// Float32 in and out, accumulated in float32 (TF32 tensor cores only when asked for:
// cuda.tf32). The bias is added to the float32 product as BiasAdd adds it (one rounding),
// but cuBLASLt's kernel sums the products in its own order, so y is the CPU's within float
// rounding, not bit for bit, like every cuBLAS GEMM; one algorithm per shape (cached), so a
// replayed step gives the same bits. Kernels are row-major (in, out) as Lockstep keeps them.
//
// Plans (the operation, its layouts and algorithm) are chosen once per shape and cached;
// choosing one allocates nothing on the device, so it may happen during a graph capture.
// Not thread-safe (the backend's thread). Internal to workers/cuda: only
// cublaslt_dense.cc includes cublasLt.h.
#ifndef LOCKSTEP_WORKERS_CUDA_CUBLASLT_DENSE_H_
#define LOCKSTEP_WORKERS_CUDA_CUBLASLT_DENSE_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"

namespace lockstep {

class LtDense {
 public:
  // A cuBLASLt handle whose GEMMs may use `workspace` (device memory of `workspace_bytes`,
  // shared with cuBLAS: both run in order on one stream). FAILED_PRECONDITION when
  // cuBLASLt refuses the handle.
  static absl::StatusOr<std::unique_ptr<LtDense>> Create(void* workspace, size_t workspace_bytes);
  ~LtDense();
  LtDense(const LtDense&) = delete;
  LtDense& operator=(const LtDense&) = delete;

  // y (rows, out) = x (rows, in) . w (in, out) + bias (out), unless bias is null, then
  // with `relu` max(y, 0), queued on `stream`. UNIMPLEMENTED when cuBLASLt has no algorithm
  // for the shape (the caller then runs Gemm, BiasAdd and Relu); INTERNAL naming the
  // cuBLASLt call otherwise.
  absl::Status Forward(int rows, int out, int in, const float* x, const float* w, const float* bias,
                       bool relu, float* y, bool tf32, cudaStream_t stream);

 private:
  struct Impl;
  explicit LtDense(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_CUDA_CUBLASLT_DENSE_H_
