// LS_HOST_DEVICE marks inline functions that CUDA kernels share with host code, so
// that one definition (threefry, say) serves both without public headers including
// CUDA headers.
#ifndef LOCKSTEP_CORE_HOST_DEVICE_H_
#define LOCKSTEP_CORE_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define LS_HOST_DEVICE __host__ __device__
#else
#define LS_HOST_DEVICE
#endif

#endif  // LOCKSTEP_CORE_HOST_DEVICE_H_
