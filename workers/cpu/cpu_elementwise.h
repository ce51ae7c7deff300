// The CPU backend's elementwise and row kernels of the float32 step: ReLU, sums, dropout,
// bias, the softmax cross-entropy and row gathers (see Backend for each one's contract).
// Internal to the CPU backend; every function runs on up to `threads` OpenMP threads and
// gives the same bits whatever their number.
#ifndef LOCKSTEP_WORKERS_CPU_CPU_ELEMENTWISE_H_
#define LOCKSTEP_WORKERS_CPU_CPU_ELEMENTWISE_H_

#include <cstddef>
#include <cstdint>

#include "core/bfloat16.h"
#include "core/rng/random.h"

namespace lockstep::cpu {

void Relu(int threads, size_t n, float* x);
void ReluBackward(int threads, size_t n, const float* y, float* dy);
void Add(int threads, size_t n, const float* a, const float* b, float* y);
void Copy(int threads, size_t n, const float* x, float* y);
void Divide(int threads, size_t n, float d, float* x);

// Backend::DivideBf16 in one pass: y16 = bf16(x / d), x untouched.
void DivideBf16(int threads, size_t n, float d, const float* x, Bf16* y16);
void Dropout(int threads, size_t n, float keep, rng::Key key, rng::Impl impl, const float* x,
             float* y, uint8_t* mask);
// Backend::DropoutBf16 in one pass, the same bits.
void DropoutBf16(int threads, size_t n, float keep, rng::Key key, rng::Impl impl, const float* x,
                 float* y, uint8_t* mask, Bf16* y16);
void DropoutBackward(int threads, size_t n, float keep, const uint8_t* mask, const float* dy,
                     float* dx);

void BiasAdd(int threads, int rows, int cols, const float* bias, float* y);
// dy16, unless null, receives dy as bfloat16 (Backend::BiasGradBf16) in the same pass.
void BiasGrad(int threads, int rows, int cols, const float* dy, float* db, Bf16* dy16 = nullptr);

void SoftmaxCrossEntropy(int threads, int b, int classes, const float* logits,
                         const int32_t* labels, float* loss, float* dlogits, float* correct);

void GatherRows(int threads, size_t row, int n, const int32_t* idx, const float* table, float* out);
void GatherLabels(int n, const int32_t* idx, const int32_t* table, int32_t* out);

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_CPU_ELEMENTWISE_H_
