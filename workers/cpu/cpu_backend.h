// The CPU backend: GEMMs through OpenBLAS's sgemm, convolution as im2col + GEMM, and
// OpenMP loops for the elementwise kernels. These loops are also the CPU references
// the CUDA kernels are tested against.
#ifndef LOCKSTEP_WORKERS_CPU_CPU_BACKEND_H_
#define LOCKSTEP_WORKERS_CPU_CPU_BACKEND_H_

#include <memory>

#include "core/backend.h"

namespace lockstep {

// Sets the threads OpenBLAS and OpenMP use, process-wide; 0 means all cores.
void SetCpuThreads(int threads);
int CpuThreads();

// Thread safety: none; see Backend.
std::unique_ptr<Backend> NewCpuBackend();

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_CPU_CPU_BACKEND_H_
