// Helpers shared by the CPU backend's bfloat16 tests (cpu_bf16_test, cpu_bf16_gemm_test,
// causal_heads_test): the rounded copies of random data, and a fixture that skips where
// the CPU has no bfloat16 kernels.
#ifndef LOCKSTEP_WORKERS_CPU_CPU_BF16_TESTING_H_
#define LOCKSTEP_WORKERS_CPU_CPU_BF16_TESTING_H_

#include <vector>

#include "absl/status/status.h"
#include "core/bfloat16.h"
#include "gtest/gtest.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep::testing {

// v with every value rounded to bfloat16 (still float32).
inline std::vector<float> Rounded(std::vector<float> v) {
  for (float& x : v) x = RoundBf16(x);
  return v;
}

// v rounded to bfloat16, as Bf16.
inline std::vector<Bf16> ToBf16(const std::vector<float>& v) {
  std::vector<Bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i].bits = Bf16Bits(v[i]);
  return out;
}

// Skips the test where the CPU backend has no bfloat16 kernels (Bf16Support).
class CpuBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::Status bf16 = NewCpuBackend(1)->Bf16Support();
    if (!bf16.ok()) GTEST_SKIP() << bf16.message();
  }
};

}  // namespace lockstep::testing

#endif  // LOCKSTEP_WORKERS_CPU_CPU_BF16_TESTING_H_
