// The fused optimizer step (Backend::ApplyUpdate: fused_update.cu) against the CPU
// backend's, which runs Divide, SumSquares, ClipByGlobalNorm and the update kernel in
// turn: bitwise, for sgd (plain, momentum, Nesterov), adam and adamw, with and without
// pmean's division, clipped, not clipped and without clipping.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "workers/cuda/cuda_testing.h"

namespace lockstep {
namespace {

using testing::Bitwise;
using testing::CudaTest;
using testing::RandomFloats;

using CudaUpdateTest = CudaTest;

TEST_F(CudaUpdateTest, ApplyUpdateIsTheUnfusedKernelsBits) {
  const size_t n = 3 * kSumChunk + 101;
  const auto g = RandomFloats(n, 40, 1e-2f);
  double norm2 = 0;
  for (float v : g) norm2 += double{v} * v;
  const float norm = static_cast<float>(std::sqrt(norm2));
  struct Case {
    const char* name;
    Backend::UpdateStep u;
    bool momentum;
  };
  std::vector<Case> cases;
  for (float divisor : {1.0f, 3.0f}) {
    // Clipping off, then a max_norm above and one below the divided gradients' norm.
    for (float max_norm : {0.0f, norm, norm / 8}) {
      cases.push_back({"sgd", {false, divisor, max_norm}, false});
      cases.push_back({"momentum", {false, divisor, max_norm, 0.9f}, true});
      cases.push_back({"nesterov", {false, divisor, max_norm, 0.9f, true}, true});
      cases.push_back({"adam", {true, divisor, max_norm}, true});
    }
  }
  for (const Case& c : cases) {
    for (const float weight_decay : c.u.adam ? std::vector{0.0f, 1e-4f} : std::vector{0.0f}) {
      const UpdateScalars s{1e-3f,  0.9f,     0.999f, 0.1f,        0.001f,
                            0.271f, 0.00299f, 1e-8f,  weight_decay};
      auto p = RandomFloats(n, 41), slot0 = RandomFloats(n, 42, 1e-3f), slot1 = RandomFloats(n, 43);
      for (float& v : slot1) v = v * v * 1e-6f;
      auto grads = g;
      std::vector<double> scratch(SumSquaresPartials(n) + 1);
      Buffer d_s = ToDevice(std::vector<UpdateScalars>{s}), d_g = ToDevice(g), d_p = ToDevice(p),
             d_0 = ToDevice(slot0), d_1 = ToDevice(slot1),
             d_scratch = ToDevice(std::vector<double>(scratch.size()));
      ASSERT_OK(cpu_->ApplyUpdate(c.u, n, &s, scratch.data(), grads.data(),
                                  c.momentum ? slot0.data() : nullptr, slot1.data(), p.data()));
      ASSERT_OK(cuda_->ApplyUpdate(c.u, n, d_s.as<UpdateScalars>(), d_scratch.as<double>(),
                                   d_g.as(), c.momentum ? d_0.as() : nullptr, d_1.as(), d_p.as()));
      const std::string what = absl::StrCat(c.name, " divisor ", c.u.divisor, " max_norm ",
                                            c.u.max_norm, " weight decay ", weight_decay);
      EXPECT_TRUE(Bitwise(ToHost(d_p, n), p)) << what;
      EXPECT_TRUE(Bitwise(ToHost(d_g, n), grads)) << what;
      EXPECT_TRUE(Bitwise(ToHost(d_0, n), slot0)) << what;
      EXPECT_TRUE(Bitwise(ToHost(d_1, n), slot1)) << what;
    }
  }
}

}  // namespace
}  // namespace lockstep
