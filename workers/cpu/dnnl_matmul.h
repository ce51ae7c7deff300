// bfloat16 GEMMs through oneDNN's matmul primitive (Debian's libdnnl, OpenMP runtime) for
// the CPU backend: bfloat16 operands, float32 products and sums, float32 results
// (Backend::GemmBf16 and GemmStridedBf16). oneDNN runs them on AMX tiles (amx_bf16) or
// AVX-512 BF16 dot products (avx512_bf16), whichever the CPU has (Bf16Isa).
//
// The primitives are created once per shape (with its transposes, leading dimensions,
// strides, alpha and beta) and cached. Results are bitwise reproducible for a given thread
// count and CPU kind (oneDNN picks its kernel by ISA and splits work by the count it was
// created with). Thread safety: none; one thread calls.
//
// Errors: a primitive oneDNN refuses to create or fails to run is INTERNAL naming the
// shape (RESOURCE_EXHAUSTED for out of memory); nothing aborts the process.
#ifndef LOCKSTEP_WORKERS_CPU_DNNL_MATMUL_H_
#define LOCKSTEP_WORKERS_CPU_DNNL_MATMUL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/bfloat16.h"

namespace lockstep::cpu {

// OK where oneDNN runs bfloat16 matmuls and convolutions natively on this CPU (avx512_bf16
// or AMX); else INVALID_ARGUMENT naming model.dtype, the missing ISA and the one oneDNN found.
absl::Status Bf16Isa();

class DnnlMatmul {
 public:
  // Primitives are created for and run on `threads` OpenMP threads (the calling thread's
  // nthreads ICV is set to it, as DnnlConv does).
  explicit DnnlMatmul(int threads);
  ~DnnlMatmul();
  DnnlMatmul(const DnnlMatmul&) = delete;
  DnnlMatmul& operator=(const DnnlMatmul&) = delete;

  // `count` products c_i = alpha * op(a_i) op(b_i) + beta * c_i as Backend::GemmStridedBf16
  // (count 1: Backend::GemmBf16, strides unused); `heads` > 1: count x heads products as
  // Backend::GemmHeadsBf16, product (i, j) at a + i * stride_a + j * head_a (b, c likewise).
  absl::Status Run(bool ta, bool tb, int m, int n, int k, float alpha, const Bf16* a, int lda,
                   int64_t stride_a, const Bf16* b, int ldb, int64_t stride_b, float beta, float* c,
                   int ldc, int64_t stride_c, int count, int heads = 1, int64_t head_a = 0,
                   int64_t head_b = 0, int64_t head_c = 0);

  // The implementation oneDNN picked for a shape ("brg:avx512_core_amx_bf16"), for tests
  // and benchmarks; creates the primitive if needed. Empty if oneDNN refused it.
  std::string Implementation(bool ta, bool tb, int m, int n, int k, int lda, int64_t stride_a,
                             int ldb, int64_t stride_b, int ldc, int64_t stride_c, int count,
                             int heads = 1, int64_t head_a = 0, int64_t head_b = 0,
                             int64_t head_c = 0);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_DNNL_MATMUL_H_
