// Mixed precision against JAX (tools/reference/golden_bf16.py): a model family's bfloat16
// step (its gradients at init on the golden batch, one replica) on any backend, held to
// JAX's bfloat16 step and to the backend's own float32 step. Part of the lockstep_golden
// testing library (golden.h); the CPU test is golden_bf16_test.cc, the CUDA one
// cuda_step_test.cc.
#ifndef LOCKSTEP_TESTS_GOLDEN_BF16_H_
#define LOCKSTEP_TESTS_GOLDEN_BF16_H_

#include <string>

#include "core/backend.h"

namespace lockstep::testing {

// What one family's comparison found, per param tensor at its worst: the bfloat16
// gradient's distance to JAX's bfloat16 one, and its error against the float32 step,
// each as a multiple of JAX's bfloat16 error (||g_jax_bf16 - g_jax_f32||).
struct Bf16GoldenResult {
  double loss = 0, jax_loss = 0;
  double worst_distance = 0;  // max ||g - g_jax_bf16|| / jax_error
  double worst_error = 0;     // max ||g - g_f32|| / jax_error
};

// For `family` ("cnn", "bn_convnet", "resnet", "decoder"; bf16_<family>.safetensors), on
// `backend`: the loss within 1e-3 of JAX's bfloat16 loss, and every gradient tensor
//   within bfloat16 rounding of JAX's:  ||g - g_jax_bf16|| <= kBf16Distance * jax_error
//   no less precise than JAX's:         ||g - g_f32||      <= kBf16Precision * jax_error
// where g_f32 is the backend's own float32 gradient of the same model (within 1e-5 of
// JAX's float32 one, the other goldens show). Prints each tensor's figures.
inline constexpr double kBf16Distance = 3.0;
inline constexpr double kBf16Precision = 1.5;
Bf16GoldenResult ExpectBf16StepMatchesJax(Backend* backend, const std::string& family);

}  // namespace lockstep::testing

#endif  // LOCKSTEP_TESTS_GOLDEN_BF16_H_
