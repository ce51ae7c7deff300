// Convolutions through oneDNN's primitives (Debian's libdnnl, OpenMP runtime) for the CPU
// backend: forward_training, backward_data and backward_weights (with the bias's
// gradient), on NHWC activations and the HWIO kernel in place. oneDNN picks its own
// blocked kernel layout (its JIT convolutions need one; fixed HWIO gets only its
// im2col + GEMM implementation, slower for forward and backward-weights), so each
// call reorders the kernel (tens of KB) into it or the gradient out of it; backward-data
// on one thread keeps HWIO, where the GEMM implementation is the faster (dnnl_conv.cc).
// The primitives are created once per geometry and cached; their scratchpads and the
// reordered kernels share one buffer owned here.
//
// Results are bitwise reproducible for a given thread count (oneDNN splits work by the
// count it was created with), not across counts. Thread safety: none; one thread calls.
//
// Errors: a primitive that oneDNN fails to run, or the shared buffer that cannot be
// allocated, is a Status naming the primitive and the geometry: RESOURCE_EXHAUSTED for
// out of memory, INTERNAL otherwise. Nothing aborts the process.
#ifndef LOCKSTEP_WORKERS_CPU_DNNL_CONV_H_
#define LOCKSTEP_WORKERS_CPU_DNNL_CONV_H_

#include <oneapi/dnnl/dnnl_types.h>

#include <functional>
#include <memory>

#include "absl/status/status.h"
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
  // be null), without scratch: they need none of the caller's. INTERNAL also for a
  // geometry Supports() refused.
  absl::Status Forward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                       float* y);
  absl::Status BackwardWeights(const ConvGeometry& g, const float* x, const float* dy, float* dw,
                               float* dbias);
  absl::Status BackwardData(const ConvGeometry& g, const float* w, const float* dy, float* dx);

  // Test hook: when set, called before each primitive runs with its name (as in the
  // errors: "convolution_forward", "convolution_backward_weights",
  // "convolution_backward_data"); a status other than dnnl_success is thrown as the
  // dnnl::error oneDNN throws for a failed primitive, and reported as one.
  using FaultForTesting = std::function<dnnl_status_t(const char* primitive)>;
  void set_fault_for_testing(FaultForTesting fault);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_DNNL_CONV_H_
