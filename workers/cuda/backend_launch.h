// LS_LAUNCH, the body of a CudaBackend kernel method, for the files that define them
// (cuda_backend_ops.cc and the ones beside it). Internal to workers/cuda.
#ifndef LOCKSTEP_WORKERS_CUDA_BACKEND_LAUNCH_H_
#define LOCKSTEP_WORKERS_CUDA_BACKEND_LAUNCH_H_

#include <utility>

#include "workers/cuda/cuda_backend_impl.h"

// Selects the device, runs the launcher `expr` and returns from the calling kernel method
// with its error (file:line), recorded as Failed says.
#define LS_LAUNCH(expr)                                           \
  do {                                                            \
    if (absl::Status ls_active_ = Activate(); !ls_active_.ok()) { \
      return Failed(std::move(ls_active_));                       \
    }                                                             \
    return Check((expr), #expr, __FILE__, __LINE__);              \
  } while (0)

#endif  // LOCKSTEP_WORKERS_CUDA_BACKEND_LAUNCH_H_
