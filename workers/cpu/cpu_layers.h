// The CPU backend's kernels for the layers beyond conv and dense: activations, average
// and max pooling (see Backend for each one's contract; layer norm: cpu_layer_norm.h). Internal to
// the CPU backend; every function runs on up to `threads` OpenMP threads and gives the same bits
// whatever their number.
#ifndef LOCKSTEP_WORKERS_CPU_CPU_LAYERS_H_
#define LOCKSTEP_WORKERS_CPU_CPU_LAYERS_H_

#include <cstddef>

#include "core/backend.h"

namespace lockstep::cpu {

void Activate(int threads, Activation a, size_t n, const float* x, float* y);
void ActivateBackward(int threads, Activation a, size_t n, const float* x, float* dy);

void AvgPool(int threads, const ConvGeometry& g, bool count_include_pad, const float* x, float* y);
void AvgPoolBackward(int threads, const ConvGeometry& g, bool count_include_pad, const float* dy,
                     float* dx);
void MaxPool(int threads, const ConvGeometry& g, const float* x, float* y);
void MaxPoolBackward(int threads, const ConvGeometry& g, const float* x, const float* dy,
                     float* dx);

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_CPU_LAYERS_H_
