// Convolutions through oneDNN's primitives (Debian's libdnnl, OpenMP runtime) for the CPU
// backend: forward_training, backward_data and backward_weights (with the bias's
// gradient), on NHWC activations and the HWIO kernel in place. oneDNN picks its own
// blocked kernel layout (its JIT convolutions need one; fixed HWIO gets only its
// im2col + GEMM implementation, 2-3x slower here for forward and backward-weights), so each
// call reorders the kernel (tens of KB) into it or the gradient out of it; backward-data
// on one thread keeps HWIO, where the GEMM implementation is the faster (dnnl_conv.cc).
// The primitives are created once per geometry and cached; their scratchpads and the
// reordered kernels share one buffer owned here.
//
// Results are bitwise reproducible for a given thread count (oneDNN splits work by the
// count it was created with), not across counts. Thread safety: none; one thread calls.
#ifndef LOCKSTEP_WORKERS_CPU_DNNL_CONV_H_
#define LOCKSTEP_WORKERS_CPU_DNNL_CONV_H_

#include <memory>

#include "core/backend.h"

namespace lockstep::cpu {

class DnnlConv {
 public:
  // Primitives are created for and run on `threads` OpenMP threads: every call sets the
  // calling thread's nthreads ICV (omp_set_num_threads, a per-thread setting), which is
  // what oneDNN's OpenMP runtime reads.
  explicit DnnlConv(int threads);
  ~DnnlConv();
  DnnlConv(const DnnlConv&) = delete;
  DnnlConv& operator=(const DnnlConv&) = delete;

  // Whether oneDNN builds the three primitives for g (built and cached on the first ask;
  // a failure is remembered too). The calls below need it true.
  bool Supports(const ConvGeometry& g);

  // As Backend::ConvForward, ConvBackwardWeights and ConvBackwardData (bias and dbias may
  // be null), without scratch: they need none of the caller's.
  void Forward(const ConvGeometry& g, const float* x, const float* w, const float* bias, float* y);
  void BackwardWeights(const ConvGeometry& g, const float* x, const float* dy, float* dw,
                       float* dbias);
  void BackwardData(const ConvGeometry& g, const float* w, const float* dy, float* dx);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_DNNL_CONV_H_
