// Test fixture for the CUDA tests: a CUDA backend on device 0 and the CPU backend to
// compare it with. Where no GPU is usable (no driver, no device: CI), SetUp skips the
// test with GTEST_SKIP and says why; where one is, any failure to set up fails the test.
#ifndef LOCKSTEP_WORKERS_CUDA_CUDA_TESTING_H_
#define LOCKSTEP_WORKERS_CUDA_CUDA_TESTING_H_

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"
#include "workers/cuda/cuda_backend.h"

namespace lockstep::testing {

// Why CUDA tests cannot run here, or empty when a GPU is usable.
inline std::string NoGpuReason() {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return std::string(count.status().message());
  if (*count == 0) return "no CUDA device";
  return "";
}

inline std::vector<float> RandomFloats(size_t n, int seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = NoGpuReason();
    if (!why.empty()) GTEST_SKIP() << "CUDA test skipped, no usable GPU: " << why;
    ASSERT_OK_AND_ASSIGN(cuda_, NewCudaBackend(0, Options()));
    cpu_ = NewCpuBackend(DefaultCpuThreads());
  }
  virtual CudaBackendOptions Options() const { return {}; }

  // A device copy of `v`.
  template <typename T>
  Buffer ToDevice(const std::vector<T>& v) {
    absl::StatusOr<Buffer> b = cuda_->Upload(v.data(), v.size() * sizeof(T));
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? std::move(b).value() : Buffer();
  }
  // The first n elements of a device buffer, after synchronizing (which must succeed).
  template <typename T = float>
  std::vector<T> ToHost(const Buffer& b, size_t n) {
    std::vector<T> v(n);
    EXPECT_TRUE(cuda_->CopyToHost(v.data(), b.as<void>(), n * sizeof(T)).ok());
    const absl::Status st = cuda_->Synchronize();
    EXPECT_TRUE(st.ok()) << st;
    return v;
  }

  std::unique_ptr<Backend> cuda_, cpu_;
};

// Bitwise equality of float arrays (EXPECT_EQ on vectors would call -0 and 0 equal and
// NaN unequal).
inline bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_WORKERS_CUDA_CUDA_TESTING_H_
