// The CPU backend's GEMMs (Backend::Gemm): oneDNN's or OpenBLAS's single-threaded sgemm,
// picked by shape, split into a fixed grid of blocks of c across the backend's own OpenMP
// team, so that the bits depend only on the thread count (cpu_backend.h).
#ifndef LOCKSTEP_WORKERS_CPU_CPU_GEMM_H_
#define LOCKSTEP_WORKERS_CPU_CPU_GEMM_H_

#include "absl/status/status.h"

namespace lockstep::cpu {

// Row-major c = alpha * op(a) * op(b) + beta * c with op(a) m x k, op(b) k x n, on
// `threads` threads; `onednn_wide`: wide products on oneDNN's sgemm (else all on OpenBLAS).
// May set the calling thread's OpenMP nthreads ICV to 1 (see cpu_backend.h). Errors:
// oneDNN's sgemm failing (RESOURCE_EXHAUSTED for out of memory, else INTERNAL).
absl::Status Gemm(int threads, bool onednn_wide, bool ta, bool tb, int m, int n, int k, float alpha,
                  const float* a, const float* b, float beta, float* c);

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_CPU_GEMM_H_
