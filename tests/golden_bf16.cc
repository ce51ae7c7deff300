// Mixed precision against JAX: a model family's bfloat16 step held to JAX's and to the
// backend's own float32 step. Contract: golden_bf16.h.
#include "tests/golden_bf16.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/data/token_dataset.h"
#include "tests/golden.h"

namespace lockstep::testing {
namespace {

// The file's gradient `name`: bfloat16 bits (its "bf16" metadata lists them) or float32.
std::vector<float> Gradient(const SafeTensors& st, const std::string& name,
                            const std::vector<std::string>& bf16) {
  if (std::find(bf16.begin(), bf16.end(), name) == bf16.end()) return *st.F32(name);
  const SafeTensor& t = st.tensors().at(name);
  EXPECT_EQ(t.dtype, "U16") << name;
  std::vector<float> out(t.data.size() / sizeof(uint16_t));
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, t.data.data() + i * sizeof(bits), sizeof(bits));
    out[i] = Bf16Float(bits);
  }
  return out;
}

double Distance(const float* a, const float* b, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
  return std::sqrt(sum);
}

// The same model with every dtype float32 (the golden's float32 step).
v1::JobSpec Float32Spec(v1::JobSpec spec) {
  spec.mutable_model()->clear_dtype();
  return spec;
}

}  // namespace

Bf16GoldenResult ExpectBf16StepMatchesJax(Backend* backend, const std::string& family) {
  Bf16GoldenResult result;
  const absl::StatusOr<SpecGolden> read = ReadSpecGolden("bf16_" + family + ".safetensors");
  EXPECT_OK(read.status());
  if (!read.ok()) return result;
  SpecGolden g = *read;
  // The CNN's init is init_cnn_seed0.safetensors' (tensors named as params).
  if (const auto init = g.st.metadata().find("init"); init != g.st.metadata().end()) {
    const absl::StatusOr<SafeTensors> params = SafeTensors::Read(GoldenPath(init->second));
    EXPECT_OK(params.status());
    if (!params.ok()) return result;
    for (const ParamEntry& e : g.setup.model.layout().entries()) {
      g.st.AddF32("init." + e.name, e.shape, *params->F32(e.name));
    }
  }
  Dataset data;
  if (g.st.tensors().contains("data.stream")) {
    absl::StatusOr<Dataset> windows =
        WindowTokens(*g.st.I32("data.stream"), static_cast<int>(g.spec.dataset().context()),
                     "data.stream", family);
    EXPECT_OK(windows.status());
    if (!windows.ok()) return result;
    data = *std::move(windows);
  } else {
    data = GoldenDataset(g.st, "data");
  }
  const rng::Key key = GoldenDropoutKey(g.st);
  const absl::StatusOr<GoldenGradients> bf16 = GradientsAtInit(backend, g, data, key);
  EXPECT_OK(bf16.status());
  SpecGolden f32 = g;
  f32.spec = Float32Spec(g.spec);
  const absl::StatusOr<TrainSetup> setup32 = SetupFromSpec(f32.spec);
  EXPECT_OK(setup32.status());
  if (!bf16.ok() || !setup32.ok()) return result;
  f32.setup = *setup32;
  const absl::StatusOr<GoldenGradients> ref = GradientsAtInit(backend, f32, data, key);
  EXPECT_OK(ref.status());
  if (!ref.ok()) return result;

  result.loss = bf16->loss;
  result.jax_loss = (*g.st.F32("grads.loss"))[0];
  EXPECT_NEAR(result.loss, result.jax_loss, 1e-3 * std::fabs(result.jax_loss)) << family;
  const std::vector<std::string> bf16_names =
      nlohmann::json::parse(g.st.metadata().at("bf16")).get<std::vector<std::string>>();
  std::printf("%s: loss %.6f (JAX bf16 %.6f, float32 %.6f, JAX float32 %.6f)\n", family.c_str(),
              bf16->loss, result.jax_loss, ref->loss, (*g.st.F32("f32.loss"))[0]);
  for (const ParamEntry& e : g.setup.model.layout().entries()) {
    const std::vector<float> jax = Gradient(g.st, "grads." + e.name, bf16_names);
    if (jax.size() != e.size) {
      ADD_FAILURE() << e.name << ": " << jax.size() << " values in the file, " << e.size << " here";
      continue;
    }
    const float* mine = bf16->grads.data() + e.offset;
    const double jax_error = (*g.st.F32("jax_error." + e.name))[0];
    const double distance = Distance(mine, jax.data(), e.size);
    const double error = Distance(mine, ref->grads.data() + e.offset, e.size);
    const double norm = (*g.st.F32("f32_norm." + e.name))[0];
    std::printf("  %-44s |g| %.3e  JAX bf16 error %.3e  ours %.3e (%.2fx)  to JAX's %.2fx\n",
                e.name.c_str(), norm, jax_error, error, error / jax_error, distance / jax_error);
    EXPECT_LE(distance, kBf16Distance * jax_error) << family << " " << e.name;
    EXPECT_LE(error, kBf16Precision * jax_error) << family << " " << e.name;
    result.worst_distance = std::max(result.worst_distance, distance / jax_error);
    result.worst_error = std::max(result.worst_error, error / jax_error);
  }
  return result;
}

}  // namespace lockstep::testing
