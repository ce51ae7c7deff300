// The patch matrix of the default (non-oneDNN) convolution: Im2Col writes each output
// position's receptive field as a row, Col2Im sums a patch matrix's gradient back into
// the image. Internal to the CPU backend; the same bits whatever the thread count.
#ifndef LOCKSTEP_WORKERS_CPU_CPU_IM2COL_H_
#define LOCKSTEP_WORKERS_CPU_CPU_IM2COL_H_

#include "core/backend.h"

namespace lockstep::cpu {

// cols: [b * oh * ow, kh * kw * c], NHWC patches with zeros where they leave the image.
void Im2Col(int threads, const ConvGeometry& g, const float* x, float* cols);
// dx = the sum, per input pixel, of the patch entries that read it (Im2Col's transpose).
void Col2Im(int threads, const ConvGeometry& g, const float* dcols, float* dx);

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_CPU_IM2COL_H_
