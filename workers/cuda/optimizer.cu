#include "workers/cuda/launch.cuh"
#include "workers/cuda/optimizer.cuh"

namespace lockstep::cuda {
namespace {

__global__ void SgdKernel(size_t n, float lr, float momentum, const float* g, float* trace,
                          float* p) {
  const float neg_lr = -lr;
  for (size_t i = FirstIndex(); i < n; i += Stride()) {
    float u = g[i];
    if (trace != nullptr) u = trace[i] = g[i] + momentum * trace[i];
    p[i] = p[i] + neg_lr * u;
  }
}

__global__ void AdamKernel(size_t n, const AdamScalars* scalars, const float* g, float* mu,
                           float* nu, float* p) {
  const AdamScalars s = *scalars;
  const float neg_lr = -s.lr;
  for (size_t i = FirstIndex(); i < n; i += Stride()) {
    mu[i] = s.one_minus_b1 * g[i] + s.b1 * mu[i];
    nu[i] = s.one_minus_b2 * (g[i] * g[i]) + s.b2 * nu[i];
    const float mu_hat = mu[i] / s.bias_correction1;
    const float nu_hat = nu[i] / s.bias_correction2;
    float u = mu_hat / (sqrtf(nu_hat) + s.eps);
    if (s.weight_decay != 0.0f) u = u + s.weight_decay * p[i];
    p[i] = p[i] + neg_lr * u;
  }
}

}  // namespace

cudaError_t SgdUpdate(size_t n, float lr, float momentum, const float* g, float* trace, float* p,
                      cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SgdKernel<<<Blocks(n), kThreads, 0, stream>>>(n, lr, momentum, g, trace, p);
  return cudaGetLastError();
}

cudaError_t AdamUpdate(size_t n, const AdamScalars* s, const float* g, float* mu, float* nu,
                       float* p, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  AdamKernel<<<Blocks(n), kThreads, 0, stream>>>(n, s, g, mu, nu, p);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
