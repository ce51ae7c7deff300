// The CPU backend: GEMMs through OpenBLAS's sgemm, convolution as im2col + GEMM, and
// OpenMP loops for the elementwise kernels. These loops are also the CPU references
// the CUDA kernels are tested against.
#ifndef LOCKSTEP_WORKERS_CPU_CPU_BACKEND_H_
#define LOCKSTEP_WORKERS_CPU_CPU_BACKEND_H_

#include <memory>

#include "core/backend.h"

namespace lockstep {

// The hardware threads (std::thread::hardware_concurrency), at least 1: what a "0 = all
// cores" thread setting resolves to.
int DefaultCpuThreads();

// A CPU backend whose kernels and GEMMs run on `threads` threads; `threads` >= 1 (a
// smaller value means 1). The count belongs to the backend: nothing process-wide is
// configured, and backends with different counts can live in one process.
//
// Thread safety: none; see Backend. Gemm sets the calling thread's OpenMP nthreads ICV
// (omp_set_num_threads) to `threads`: OpenBLAS sizes its team from it, and copies it
// into its own process-wide count when that differs. Hence two backends with different
// counts above 1 must not run GEMMs at the same time on different threads; one after the
// other, on any threads, each runs on its own count.
std::unique_ptr<Backend> NewCpuBackend(int threads);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_CPU_CPU_BACKEND_H_
