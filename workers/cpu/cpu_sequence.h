// The CPU backend's kernels for the sequence layers: embedding lookups and their
// gradient, broadcast adds, strided batches of GEMMs, the attention softmax, and a
// vision transformer's class token and pooling (see
// Backend for each one's contract). Internal to the CPU backend; each runs on up to
// `threads` OpenMP threads and gives the same bits whatever their number.
#ifndef LOCKSTEP_WORKERS_CPU_CPU_SEQUENCE_H_
#define LOCKSTEP_WORKERS_CPU_CPU_SEQUENCE_H_

#include <cstdint>

namespace lockstep::cpu {

void Embed(int threads, int n, int features, const float* ids, const float* table, float* out);
// Sums each table row's gradient in row order, whatever the threads (rows are split by
// the embedding row they update).
void EmbedBackward(int threads, int n, int features, int num_embeddings, const float* ids,
                   const float* dy, float* dtable);
void AddRows(int threads, int rows, int cols, const float* x, const float* bias, float* y);
// Each product single-threaded on OpenBLAS, the products spread over the threads.
void GemmStrided(int threads, bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                 int lda, int64_t stride_a, const float* b, int ldb, int64_t stride_b, float beta,
                 float* c, int ldc, int64_t stride_c, int count);
void AttentionSoftmax(int threads, int rows, int t, bool causal, float* s);
void SoftmaxBackward(int threads, int rows, int cols, const float* p, float* dp);
void MaskedScale(int threads, int rows, int cols, const uint8_t* mask, float keep, const float* x,
                 float* y);
// A vision transformer's class token and pooling over positions.
void ClassToken(int threads, int b, int t, int f, const float* cls, const float* x, float* y);
void ClassTokenBackward(int threads, int b, int t, int f, const float* dy, float* dx, float* dcls);
void SequencePool(int threads, bool mean, int b, int t, int f, const float* x, float* y);
void SequencePoolBackward(int threads, bool mean, int b, int t, int f, const float* dy, float* dx);

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_CPU_SEQUENCE_H_
