// The CPU backend: convolutions through oneDNN's primitives (dnnl_conv.h), GEMMs through
// oneDNN's or OpenBLAS's sgemm (by shape, threaded in cpu_gemm.cc), and OpenMP loops for the
// elementwise kernels (activations and pools in cpu_layers.cc, layer norm in
// cpu_layer_norm.cc). These loops are also the CPU references the CUDA kernels are tested
// against.
#ifndef LOCKSTEP_WORKERS_CPU_CPU_BACKEND_H_
#define LOCKSTEP_WORKERS_CPU_CPU_BACKEND_H_

#include <memory>

#include "core/backend.h"

namespace lockstep {

// The hardware threads (std::thread::hardware_concurrency), at least 1: what a "0 = all
// cores" thread setting resolves to.
int DefaultCpuThreads();

// A CPU backend whose kernels and GEMMs run on `threads` threads; `threads` >= 1 (a
// smaller value means 1). The count belongs to the backend: it splits each GEMM across
// its own OpenMP team and OpenBLAS runs single-threaded, so nothing process-wide is set,
// and backends with different counts can live in one process without affecting each
// other. Results are bitwise reproducible for a given count.
//
// Thread safety: none; see Backend. Gemm may set the calling thread's OpenMP nthreads ICV
// (omp_set_num_threads, a per-thread setting) to 1: it does so on a 1-thread backend, and
// on any for products it runs on the calling thread alone; the oneDNN convolutions set it
// to `threads` (oneDNN's OpenMP runtime sizes its teams from it).
//
// `kernels`: kOneDnn (the default) or kOpenBlas, the convolutions as im2col + OpenBLAS
// GEMMs (Backend's defaults): the former implementation, kept for comparison (benchmarks,
// tests); each is bitwise reproducible for a given thread count, and the two agree to
// float rounding.
enum class CpuKernels { kOneDnn, kOpenBlas };
std::unique_ptr<Backend> NewCpuBackend(int threads, CpuKernels kernels = CpuKernels::kOneDnn);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_CPU_CPU_BACKEND_H_
