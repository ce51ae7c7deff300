// The CPU backend's LayerNorm (Backend::LayerNorm and LayerNormBackward's contracts).
// Internal to the CPU backend; each function runs on up to `threads` OpenMP threads and
// gives the same bits whatever their number.
#ifndef LOCKSTEP_WORKERS_CPU_CPU_LAYER_NORM_H_
#define LOCKSTEP_WORKERS_CPU_CPU_LAYER_NORM_H_

namespace lockstep::cpu {

void LayerNorm(int threads, int rows, int cols, float epsilon, const float* x, const float* scale,
               const float* bias, float* y, float* mean, float* rstd);
void LayerNormBackward(int threads, int rows, int cols, const float* x, const float* scale,
                       const float* mean, const float* rstd, const float* dy, float* dx,
                       float* dscale, float* dbias);

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_CPU_LAYER_NORM_H_
