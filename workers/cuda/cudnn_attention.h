// CudnnAttention: multi-head attention's core on cuDNN's fused scaled-dot-product
// attention (SDPA, flash attention) through its graph API (cudnn-frontend), for the
// bfloat16 policy (cuDNN's SDPA takes fp16, bf16 and fp8 only):
//   o = softmax(q . k over D, causal mask) . v
// on q, k, v and o laid out as Lockstep's attention layer leaves them ([b, T, H, D],
// bfloat16; q already divided by its scale, so cuDNN's own scale is 1), and its backward
// pass (dq, dk, dv from do, with the softmax statistics the forward pass kept). No
// dropout: the layer keeps its batched-GEMM path whenever dropout is active.
//
// Not the batched-GEMM path's bits: cuDNN keeps the scores and the softmax in float32
// (online, blockwise) and rounds only the probabilities it multiplies v by, where XLA's
// sequence (and Lockstep's reference path) rounds the scores, the softmax's steps and the
// probabilities to bfloat16; the results agree within bfloat16 rounding
// (cuda_attention_test). Deterministic: the backward pass runs cuDNN's deterministic
// algorithm (no atomics in dq's sums), so a replayed step gives the same bits.
//
// Plans are built once per shape and cached; building one allocates (its workspace), so
// it must not happen inside a graph capture (Supports builds them beforehand). Compiled,
// not yet run on a GPU. Not thread-safe (the backend's thread). Internal to workers/cuda:
// only cudnn_attention.cc includes cuDNN's headers.
#ifndef LOCKSTEP_WORKERS_CUDA_CUDNN_ATTENTION_H_
#define LOCKSTEP_WORKERS_CUDA_CUDNN_ATTENTION_H_

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/backend.h"

namespace lockstep {

class CudnnAttention {
 public:
  // A cuDNN handle on `stream`. FAILED_PRECONDITION when cuDNN cannot be used.
  static absl::StatusOr<std::unique_ptr<CudnnAttention>> Create(cudaStream_t stream);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Whether cuDNN takes s's forward and backward passes (building and caching their
  // plans). False (never an error) where it takes either not; `why` then says why.
  bool Supports(const AttentionShape& s, std::string* why = nullptr);

  // o [b, T, H, D] = softmax(q k^T, causal) v per sample and head; stats [b, H, T]
  // (float32) receives each row's softmax statistics, which Backward reads. For an s that
  // Supports took; queued on the stream; errors name the cuDNN call.
  absl::Status Forward(const AttentionShape& s, const Bf16* q, const Bf16* k, const Bf16* v,
                       Bf16* o, float* stats);
  // dq, dk, dv [b, T, H, D] from do and what Forward took and gave.
  absl::Status Backward(const AttentionShape& s, const Bf16* q, const Bf16* k, const Bf16* v,
                        const Bf16* o, const Bf16* d_o, const float* stats, Bf16* dq, Bf16* dk,
                        Bf16* dv);

 private:
  struct Impl;
  explicit CudnnAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_CUDA_CUDNN_ATTENTION_H_
