// The batch gather: a step's samples and labels, picked by index from a dataset resident
// in device memory. Indices are device memory and were range-checked on the host.
#ifndef LOCKSTEP_WORKERS_CUDA_GATHER_CUH_
#define LOCKSTEP_WORKERS_CUDA_GATHER_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace lockstep::cuda {

// out (n, row) = table rows idx[0..n).
cudaError_t GatherRows(size_t row, int n, const int32_t* idx, const float* table, float* out,
                       cudaStream_t stream);
// out[i] = table[idx[i]].
cudaError_t GatherLabels(int n, const int32_t* idx, const int32_t* table, int32_t* out,
                         cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_GATHER_CUH_
