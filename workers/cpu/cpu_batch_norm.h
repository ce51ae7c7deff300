// The CPU backend's Flax BatchNorm kernels (see Backend::BatchNormMoments and the methods
// after it for each one's contract). Internal to the CPU backend; every function runs on
// up to `threads` OpenMP threads and gives the same bits whatever their number: column
// sums go over kBatchNormBlocks fixed row blocks, added in block order.
#ifndef LOCKSTEP_WORKERS_CPU_CPU_BATCH_NORM_H_
#define LOCKSTEP_WORKERS_CPU_CPU_BATCH_NORM_H_

#include "core/bfloat16.h"

namespace lockstep::cpu {

// round_x: x read as bf16(x) (Backend::BatchNormMomentsBf16, BatchNormBackwardReduceBf16).
void BatchNormMoments(int threads, int rows, int cols, const float* x, float* partials,
                      float* moments, bool round_x = false);
void BatchNormVariance(int cols, const float* moments, float* var);
void BatchNormApply(int threads, int rows, int cols, float epsilon, const float* x,
                    const float* mean, const float* var, const float* scale, const float* bias,
                    float* y);
// Backend::BatchNormApplyBf16 in one pass: the same bits as BatchNormApply, AddRowsBf16
// and ReluBf16 in turn, on bf16(x) (so x may be a conv's unrounded sums).
void BatchNormApplyBf16(int threads, int rows, int cols, float epsilon, const float* x,
                        const float* mean, const float* var, const float* scale, const float* bias,
                        bool relu, float* y, Bf16* y16);
void BatchNormUpdateStats(int cols, float momentum, float one_minus_momentum, const float* mean,
                          const float* var, float* ra_mean, float* ra_var);
void BatchNormBackwardReduce(int threads, int rows, int cols, float epsilon, const float* x,
                             const float* dy, const float* mean, const float* var, float* partials,
                             float* sums, float* dscale, float* dbias, bool round_x = false);
void BatchNormBackwardApply(int threads, int rows, int cols, float epsilon, int replicas,
                            const float* x, const float* dy, const float* moments, const float* var,
                            const float* scale, const float* sums, float* dx);
// BatchNormBackwardApply on bf16(x), dx written as bfloat16 (Backend::BatchNormBackwardApplyBf16).
void BatchNormBackwardApplyBf16(int threads, int rows, int cols, float epsilon, int replicas,
                                const float* x, const float* dy, const float* moments,
                                const float* var, const float* scale, const float* sums,
                                Bf16* dx16);

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_CPU_BATCH_NORM_H_
