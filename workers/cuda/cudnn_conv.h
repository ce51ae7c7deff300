// CudnnConvs: the CUDA backend's convolutions on cuDNN's graph API (cudnn-frontend),
// where cuDNN has deterministic float32 engines for a geometry: the forward pass with its
// bias and ReLU fused into one cuDNN graph where an engine takes that graph (else the
// convolution alone, then the backend's BiasAdd and Relu), the data gradient and the
// filter gradient. Plain float32 (no TF32 tensor cores unless asked for: cuda.tf32), and
// no engine that cuDNN marks nondeterministic, so a replayed step gives the same bits.
// Mixed precision's bfloat16 convolutions (Backend's ConvForwardBf16 and its gradients)
// run here too: bfloat16 operands, float32 compute, sums and outputs, on tensor cores
// (products of bfloat16 values are exact in float32, so only the order of the sums differs
// from the im2col + GemmBf16 path), deterministic engines only. Compiled, not yet run on a
// GPU: cuda_bf16_test holds them to that path and to the CPU where a GPU exists.
// Kernels are HWIO (kh, kw, c, f) in Lockstep and KRSC (f, kh, kw, c) in cuDNN's NHWC
// engines: they are transposed through the layer's scratch. The im2col + cuBLAS path
// (Backend's defaults) stays the fallback for what cuDNN does not take, and the reference
// the tests hold these to.
//
// Plans are built once per geometry (and direction) and cached; building one may allocate
// (the workspace), so it must not happen inside a graph capture: CudaBackend builds them
// when a workspace is sized (ConvScratchBytes), before the eager first step. Not
// thread-safe (the backend's thread). Internal to workers/cuda: only cudnn_conv.cc
// includes cuDNN's headers.
#ifndef LOCKSTEP_WORKERS_CUDA_CUDNN_CONV_H_
#define LOCKSTEP_WORKERS_CUDA_CUDNN_CONV_H_

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/backend.h"

namespace lockstep {

class CudnnConvs {
 public:
  // A cuDNN handle on `stream`. FAILED_PRECONDITION when cuDNN cannot be used (its
  // library refuses the handle: no usable cuDNN at run time).
  static absl::StatusOr<std::unique_ptr<CudnnConvs>> Create(cudaStream_t stream, bool tf32);
  ~CudnnConvs();
  CudnnConvs(const CudnnConvs&) = delete;
  CudnnConvs& operator=(const CudnnConvs&) = delete;

  // TF32 tensor cores allowed from now on (plans built before keep theirs).
  void set_tf32(bool tf32);
  // cuDNN's version at run time, as "9.19.0".
  std::string version() const;

  // Whether cuDNN takes g's forward pass, data gradient and filter gradient, on float32
  // or (bf16) bfloat16 operands (building and caching their plans). False (never an
  // error) where it takes any of them not; `why` then says why (the last cuDNN message).
  bool Supports(const ConvGeometry& g, bool bf16, std::string* why = nullptr);
  // The scratch a layer of geometry g needs on this path, float32 or bfloat16: its kernel
  // (or kernel gradient) in KRSC as float32.
  static size_t ScratchBytes(const ConvGeometry& g);

  // Backend::ConvForward (relu: then max(y, 0), ConvForwardRelu), ConvBackwardData and
  // ConvBackwardWeights' kernel gradient, for a g that Supports took; `scratch` holds
  // ScratchBytes(g). Work is queued on the stream; errors name the cuDNN call (INTERNAL,
  // RESOURCE_EXHAUSTED for memory). The bias gradient is the backend's (BiasGrad).
  absl::Status Forward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                       bool relu, float* y, void* scratch, Backend& backend);
  absl::Status BackwardData(const ConvGeometry& g, const float* w, const float* dy, float* dx,
                            void* scratch);
  absl::Status BackwardFilter(const ConvGeometry& g, const float* x, const float* dy, float* dw,
                              void* scratch);
  // Backend::ConvForwardBf16, ConvBackwardDataBf16 and ConvBackwardWeightsBf16 for a g that
  // Supports took with bf16; the same contract otherwise.
  absl::Status ForwardBf16(const ConvGeometry& g, const Bf16* x, const Bf16* w, float* y,
                           void* scratch);
  absl::Status BackwardDataBf16(const ConvGeometry& g, const Bf16* w, const Bf16* dy, float* dx,
                                void* scratch);
  absl::Status BackwardFilterBf16(const ConvGeometry& g, const Bf16* x, const Bf16* dy, float* dw,
                                  void* scratch);

 private:
  struct Impl;
  explicit CudnnConvs(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_CUDA_CUDNN_CONV_H_
