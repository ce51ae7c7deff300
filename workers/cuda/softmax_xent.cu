// Softmax cross-entropy on integer labels (see Backend::SoftmaxCrossEntropy): one thread per sample
// (or per position of a sequence), in the CPU backend's order of operations. Contract:
// softmax_xent.cuh.
#include "workers/cuda/launch.cuh"
#include "workers/cuda/softmax_xent.cuh"

namespace lockstep::cuda {
namespace {

__global__ void SoftmaxCrossEntropyKernel(int b, int classes, const float* logits,
                                          const int32_t* labels, float* loss, float* dlogits,
                                          float* correct) {
  const float inv_b = 1.0f / static_cast<float>(b);
  for (size_t r = FirstIndex(); r < size_t(b); r += Stride()) {
    const float* z = logits + r * classes;
    float* dz = dlogits + r * classes;
    int argmax = 0;
    for (int c = 1; c < classes; ++c) argmax = z[c] > z[argmax] ? c : argmax;
    const float mx = z[argmax];
    float sum = 0.0f;
    for (int c = 0; c < classes; ++c) sum += expf(z[c] - mx);
    const float lse = logf(sum);
    const int label = labels[r];
    loss[r] = -((z[label] - mx) - lse);
    for (int c = 0; c < classes; ++c) {
      const float softmax = expf((z[c] - mx) - lse);
      dz[c] = (softmax - (c == label ? 1.0f : 0.0f)) * inv_b;
    }
    correct[r] = argmax == label ? 1.0f : 0.0f;
  }
}

}  // namespace

cudaError_t SoftmaxCrossEntropy(int b, int classes, const float* logits, const int32_t* labels,
                                float* loss, float* dlogits, float* correct, cudaStream_t stream) {
  if (b <= 0) return cudaSuccess;
  SoftmaxCrossEntropyKernel<<<Blocks(b), kThreads, 0, stream>>>(b, classes, logits, labels, loss,
                                                                dlogits, correct);
  return cudaGetLastError();
}

}  // namespace lockstep::cuda
