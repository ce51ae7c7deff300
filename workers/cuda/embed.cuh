// nn.Embed's lookup and its gradient (see Backend::Embed). Both are bitwise equal to the
// CPU backend: the lookup copies rows, and the gradient sums each table row's dy rows in
// row order, one block per table row that occurs, with no atomics (the same bits run to
// run). The gradient reads the ids O(n^2 / kThreads) times per block on top of the O(n *
// features) sums: cheap for the n = batch * T of a step (thousands), not meant for
// millions of tokens at once.
#ifndef LOCKSTEP_WORKERS_CUDA_EMBED_CUH_
#define LOCKSTEP_WORKERS_CUDA_EMBED_CUH_

#include <cuda_runtime.h>

namespace lockstep::cuda {

// out (n, features) = table rows ids[0..n) (float token ids, exact integers in range).
cudaError_t Embed(int n, int features, const float* ids, const float* table, float* out,
                  cudaStream_t stream);
// dtable (num_embeddings, features), overwritten: zeros, then each dy row added to the
// row of its id, in row order.
cudaError_t EmbedBackward(int n, int features, int num_embeddings, const float* ids,
                          const float* dy, float* dtable, cudaStream_t stream);

}  // namespace lockstep::cuda

#endif  // LOCKSTEP_WORKERS_CUDA_EMBED_CUH_
