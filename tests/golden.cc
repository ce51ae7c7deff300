// Helpers for the tests that read tools/reference/make_golden.py's golden files.
// Contract: golden.h.
#include "tests/golden.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "core/optimizer_spec.h"

namespace lockstep::testing {

v1::ModelSpec GoldenModelSpec(const std::string& json) {
  auto spec = ParseSpec("{\"model\": " + json + "}", "golden metadata");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? spec->model() : v1::ModelSpec();
}

std::vector<float> GoldenParams(const SafeTensors& st, const Model& m, const std::string& prefix) {
  return GoldenLayoutTensors(st, m.layout(), prefix);
}

std::vector<float> GoldenLayoutTensors(const SafeTensors& st, const ParamLayout& layout,
                                       const std::string& prefix) {
  std::vector<float> flat(layout.total());
  for (const ParamEntry& e : layout.entries()) {
    const std::string name = prefix + e.name;
    auto it = st.tensors().find(name);
    EXPECT_NE(it, st.tensors().end()) << name;
    if (it == st.tensors().end()) continue;
    EXPECT_EQ(it->second.shape, e.shape) << name;
    auto v = st.F32(name);
    EXPECT_TRUE(v.ok()) << name << ": " << v.status();
    if (!v.ok() || v->size() != e.size) continue;
    std::copy(v->begin(), v->end(), flat.begin() + e.offset);
  }
  return flat;
}

Dataset GoldenDataset(const SafeTensors& st, const std::string& prefix) {
  Dataset d;
  d.images = *st.F32(prefix + ".images");
  d.labels = *st.I32(prefix + ".labels");
  d.size = static_cast<int64_t>(d.labels.size());
  d.row = d.size == 0 ? 0 : static_cast<int64_t>(d.images.size()) / d.size;
  return d;
}

void ExpectGradientsMatchJax(Backend* backend, const std::string& model_name) {
  ASSERT_OK_AND_ASSIGN(SafeTensors g, SafeTensors::Read(GoldenPath("grads.safetensors")));
  ASSERT_OK_AND_ASSIGN(SafeTensors init,
                       SafeTensors::Read(GoldenPath("init_" + model_name + "_seed0.safetensors")));
  ASSERT_OK_AND_ASSIGN(Model m, ModelFromSpec(GoldenModelSpec(init.metadata().at("model"))));
  v1::OptimizerSpec os;
  os.set_kind("sgd");
  os.set_learning_rate(0.1);
  ASSERT_OK_AND_ASSIGN(Optimizer sgd, OptimizerFromSpec(os));
  ASSERT_OK_AND_ASSIGN(
      auto exec, StepExecutor::Create(m, sgd, rng::Impl::kPartitionable, 16, backend, nullptr));
  const Dataset batch = GoldenDataset(g, "batch");
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(batch));
  ASSERT_OK(exec->SetState(TrainState::Create(GoldenParams(init, m, ""), sgd)));
  rng::Key key{};
  if (model_name == "mlp") {
    auto k = *g.U32("mlp.dropout_key");
    key = {k[0], k[1]};
  }
  std::vector<int32_t> idx(16);
  std::iota(idx.begin(), idx.end(), 0);
  ASSERT_OK_AND_ASSIGN(StepMetrics metrics, exec->ComputeGradients(d, idx, key));
  const float want_loss = (*g.F32(model_name + ".loss"))[0];
  EXPECT_NEAR(metrics.loss, want_loss, 1e-5 * std::fabs(want_loss));
  ASSERT_OK_AND_ASSIGN(std::vector<float> grads, exec->Gradients());
  const std::vector<float> want = GoldenParams(g, m, model_name + ".grads.");
  for (const ParamEntry& e : m.layout().entries()) {
    EXPECT_LE(RelativeL2({grads.data() + e.offset, e.size}, {want.data() + e.offset, e.size}), 1e-5)
        << e.name;
  }
}

void ExpectTrainingMatchesGolden(Backend* backend, const std::string& file) {
  ASSERT_OK_AND_ASSIGN(SafeTensors g, SafeTensors::Read(GoldenPath(file)));
  ASSERT_OK_AND_ASSIGN(v1::JobSpec parsed, ParseSpec(g.metadata().at("spec"), "golden spec"));
  ASSERT_OK_AND_ASSIGN(v1::JobSpec spec, Validate(parsed));
  ASSERT_OK_AND_ASSIGN(TrainSetup setup, SetupFromSpec(spec));
  const Model& m = setup.model;
  const auto data_file = g.metadata().find("data");
  Dataset data;
  if (data_file == g.metadata().end()) {
    data = GoldenDataset(g, "data");
  } else {
    const std::string name = nlohmann::json::parse(data_file->second).get<std::string>();
    ASSERT_OK_AND_ASSIGN(SafeTensors d, SafeTensors::Read(GoldenPath(name)));
    data = GoldenDataset(d, "data");
  }
  const int b = static_cast<int>(spec.global_batch_size());
  TrainingPlan plan(spec.seed(), spec.dropout_seed(), setup.impl, data.size, b, 1);
  ASSERT_OK_AND_ASSIGN(auto exec,
                       StepExecutor::Create(m, setup.optimizer, setup.impl, b, backend, nullptr));
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(data));
  ASSERT_OK(
      exec->SetState(TrainState::Create(m.Init(plan.init_key(), setup.impl), setup.optimizer)));
  const std::vector<float> losses = *g.F32("losses");
  ASSERT_EQ(losses.size(), spec.steps());
  for (uint64_t s = 0; s < spec.steps(); ++s) {
    StepPlan p = plan.Next();
    ASSERT_OK_AND_ASSIGN(StepMetrics metrics, exec->Step(d, p.indices, p.keys[0]));
    EXPECT_NEAR(metrics.loss, losses[s], 1e-5 * std::fabs(losses[s])) << "step " << s;
    ASSERT_OK_AND_ASSIGN(auto masks, exec->DropoutMasks());
    ASSERT_EQ(masks.size(), 2u);
    for (size_t i = 0; i < masks.size(); ++i) {
      EXPECT_EQ(masks[i], *g.U8("masks." + std::to_string(s) + "." + std::to_string(i)))
          << "step " << s << " dropout " << i;
    }
  }
  ASSERT_OK_AND_ASSIGN(TrainState final_state, exec->GetState());
  EXPECT_EQ(final_state.step, static_cast<int64_t>(spec.steps()));
  const std::vector<float> want = GoldenParams(g, m, "params.");
  for (const ParamEntry& e : m.layout().entries()) {
    EXPECT_LE(RelativeL2({final_state.params.data() + e.offset, e.size},
                         {want.data() + e.offset, e.size}),
              1e-5)
        << e.name;
  }
}

void ExpectTrainingMatchesOptax(Backend* backend, const std::string& optimizer) {
  ExpectTrainingMatchesGolden(backend, "train_mlp_" + optimizer + ".safetensors");
}

absl::StatusOr<SpecGolden> ReadSpecGolden(const std::string& file) {
  ASSIGN_OR_RETURN(SafeTensors st, SafeTensors::Read(GoldenPath(file)));
  ASSIGN_OR_RETURN(v1::JobSpec parsed, ParseSpec(st.metadata().at("spec"), "golden spec"));
  ASSIGN_OR_RETURN(v1::JobSpec spec, Validate(parsed));
  ASSIGN_OR_RETURN(TrainSetup setup, SetupFromSpec(spec));
  return SpecGolden{std::move(st), std::move(spec), std::move(setup)};
}

absl::StatusOr<SpecGolden> ReadLayersGolden(const std::string& name) {
  return ReadSpecGolden("layers_" + name + ".safetensors");
}

void ExpectInitWithin1e6(const SpecGolden& g) {
  const Model& m = g.setup.model;
  const std::vector<float> mine =
      m.Init(TrainingPlan::InitKey(g.spec.seed(), g.setup.impl), g.setup.impl);
  const std::vector<float> want = GoldenParams(g.st, m, "init.");
  for (const ParamEntry& e : m.layout().entries()) {
    EXPECT_LE(MaxAbsDiff({mine.data() + e.offset, e.size}, {want.data() + e.offset, e.size}), 1e-6)
        << e.name;
  }
}

void ExpectEveryTensorWithin(const Model& m, const std::vector<float>& got,
                             const std::vector<float>& want, double tolerance) {
  ExpectEveryTensorWithin(m.layout(), got, want, tolerance);
}

void ExpectEveryTensorWithin(const ParamLayout& layout, const std::vector<float>& got,
                             const std::vector<float>& want, double tolerance) {
  for (const ParamEntry& e : layout.entries()) {
    EXPECT_LE(RelativeL2({got.data() + e.offset, e.size}, {want.data() + e.offset, e.size}),
              tolerance)
        << e.name;
  }
}

void ExpectSequenceTensorsWithin1e5(const Model& m, const std::vector<float>& got,
                                    const std::vector<float>& want) {
  const auto& entries = m.layout().entries();
  auto norm = [](std::span<const float> v) {
    double s = 0;
    for (float x : v) s += double{x} * x;
    return std::sqrt(s);
  };
  for (size_t i = 0; i < entries.size(); ++i) {
    const ParamEntry& e = entries[i];
    const std::span<const float> g(got.data() + e.offset, e.size),
        w(want.data() + e.offset, e.size);
    if (!e.name.ends_with("/key/bias")) {
      EXPECT_LE(testing::RelativeL2(g, w), 1e-5) << e.name;
      continue;
    }
    const ParamEntry& kernel = entries[i - 1];  // Flax's order: key/kernel, then key/bias
    ASSERT_TRUE(kernel.name.ends_with("/key/kernel")) << kernel.name;
    std::vector<float> diff(e.size);
    for (size_t j = 0; j < e.size; ++j) diff[j] = g[j] - w[j];
    EXPECT_LE(norm(diff), 1e-5 * norm({want.data() + kernel.offset, kernel.size})) << e.name;
  }
}

absl::StatusOr<GoldenGradients> GradientsAtInit(Backend* backend, const SpecGolden& g,
                                                const Dataset& data, rng::Key key) {
  const Model& m = g.setup.model;
  const int b = static_cast<int>(g.spec.global_batch_size());
  ASSIGN_OR_RETURN(auto exec,
                   StepExecutor::Create(m, g.setup.optimizer, g.setup.impl, b, backend, nullptr));
  ASSIGN_OR_RETURN(DeviceDataset d, exec->Upload(data));
  std::vector<float> stats;
  if (m.stats_layout().total() > 0)
    stats = GoldenLayoutTensors(g.st, m.stats_layout(), "init_stats.");
  RETURN_IF_ERROR(exec->SetState(
      TrainState::Create(GoldenParams(g.st, m, "init."), g.setup.optimizer, std::move(stats))));
  std::vector<int32_t> idx(b);
  std::iota(idx.begin(), idx.end(), 0);
  ASSIGN_OR_RETURN(StepMetrics metrics, exec->ComputeGradients(d, idx, key));
  ASSIGN_OR_RETURN(std::vector<float> grads, exec->Gradients());
  return GoldenGradients{metrics.loss, std::move(grads)};
}

rng::Key GoldenDropoutKey(const SafeTensors& st) {
  auto k = st.U32("grads.dropout_key");
  return k.ok() && k->size() == 2 ? rng::Key{(*k)[0], (*k)[1]} : rng::Key{};
}

void ExpectStatsModelGradientsMatchJax(Backend* backend, const std::string& file) {
  ASSERT_OK_AND_ASSIGN(SpecGolden g, ReadSpecGolden(file));
  ASSERT_OK_AND_ASSIGN(GoldenGradients got,
                       GradientsAtInit(backend, g, GoldenDataset(g.st, "data"), {}));
  const float want_loss = (*g.st.F32("grads.loss"))[0];
  EXPECT_NEAR(got.loss, want_loss, 1e-5 * std::fabs(want_loss));
  ExpectEveryTensorWithin(g.setup.model, got.grads, GoldenParams(g.st, g.setup.model, "grads."),
                          1e-5);
}

void ExpectLayersGradientsMatchJax(Backend* backend, const std::string& name) {
  ASSERT_OK_AND_ASSIGN(SpecGolden g, ReadLayersGolden(name));
  ASSERT_OK_AND_ASSIGN(GoldenGradients got, GradientsAtInit(backend, g, GoldenDataset(g.st, "data"),
                                                            GoldenDropoutKey(g.st)));
  const float want_loss = (*g.st.F32("grads.loss"))[0];
  EXPECT_NEAR(got.loss, want_loss, 1e-5 * std::fabs(want_loss));
  ExpectSequenceTensorsWithin1e5(g.setup.model, got.grads,
                                 GoldenParams(g.st, g.setup.model, "grads."));
}

std::optional<double> Float64Reference(const SafeTensors& st, const Model& m,
                                       std::vector<double>* ref) {
  if (!st.tensors().contains("ref_loss")) return std::nullopt;
  const std::vector<float> hi = GoldenParams(st, m, "ref_hi."), lo = GoldenParams(st, m, "ref_lo.");
  ref->resize(hi.size());
  for (size_t i = 0; i < hi.size(); ++i) (*ref)[i] = double{hi[i]} + double{lo[i]};
  const std::vector<float> loss = *st.F32("ref_loss");
  return double{loss[0]} + loss[1];
}

double XlaWorstRelativeError(const SafeTensors& st, const Model& m) {
  std::vector<double> ref;
  if (!Float64Reference(st, m, &ref)) return 0;
  std::vector<double> norms;
  for (const ParamEntry& e : m.layout().entries()) {
    double n = 0;
    for (size_t i = e.offset; i < e.offset + e.size; ++i) n += ref[i] * ref[i];
    norms.push_back(std::sqrt(n));
  }
  const double top = *std::max_element(norms.begin(), norms.end());
  double worst = 0;
  for (size_t j = 0; j < norms.size(); ++j) {
    const ParamEntry& e = m.layout().entries()[j];
    if (norms[j] <= 1e-6 * top) continue;  // a true gradient of 0 (attention's key/bias)
    worst = std::max(worst, (*st.F32("xla_error." + e.name))[0] / norms[j]);
  }
  return worst;
}

void ExpectAsCloseToFloat64AsXla(const Model& m, const GoldenGradients& got, const SafeTensors& st,
                                 double slack) {
  std::vector<double> ref;
  const std::optional<double> loss = Float64Reference(st, m, &ref);
  ASSERT_TRUE(loss.has_value()) << "the file has no float64 reference (ref_loss)";
  EXPECT_NEAR(got.loss, *loss, 1e-5 * std::fabs(*loss));
  for (const ParamEntry& e : m.layout().entries()) {
    double err = 0, norm = 0;
    for (size_t i = e.offset; i < e.offset + e.size; ++i) {
      err += (got.grads[i] - ref[i]) * (got.grads[i] - ref[i]);
      norm += ref[i] * ref[i];
    }
    err = std::sqrt(err), norm = std::sqrt(norm);
    const double xla = (*st.F32("xla_error." + e.name))[0];
    // Past XLA's error times the slack, and past 1e-6 of the tensor: a few float32 ulps,
    // where XLA's error and ours are both roundings of short sums and their ratio chance.
    EXPECT_LE(err, std::max(slack * xla, 1e-6 * norm))
        << e.name << ": |g| " << norm << ", error " << err << ", XLA's " << xla;
  }
}

void ExpectLayersTrainingMatchesOptax(Backend* backend, const std::string& name) {
  ASSERT_OK_AND_ASSIGN(SpecGolden g, ReadLayersGolden(name));
  const Model& m = g.setup.model;
  const int b = static_cast<int>(g.spec.global_batch_size());
  const Dataset data = GoldenDataset(g.st, "data");
  TrainingPlan plan(g.spec.seed(), g.spec.dropout_seed(), g.setup.impl, data.size, b, 1);
  ASSERT_OK_AND_ASSIGN(
      auto exec, StepExecutor::Create(m, g.setup.optimizer, g.setup.impl, b, backend, nullptr));
  ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(data));
  ASSERT_OK(
      exec->SetState(TrainState::Create(m.Init(plan.init_key(), g.setup.impl), g.setup.optimizer)));
  const std::vector<float> losses = *g.st.F32("train.losses");
  ASSERT_EQ(losses.size(), g.spec.steps());
  for (uint64_t s = 0; s < g.spec.steps(); ++s) {
    StepPlan p = plan.Next();
    ASSERT_OK_AND_ASSIGN(StepMetrics metrics, exec->Step(d, p.indices, p.keys[0]));
    EXPECT_NEAR(metrics.loss, losses[s], 1e-5 * std::fabs(losses[s])) << "step " << s;
    ASSERT_OK_AND_ASSIGN(auto masks, exec->DropoutMasks());
    const std::string prefix = "masks." + std::to_string(s) + ".";
    for (size_t i = 0; i < masks.size(); ++i) {
      ASSERT_TRUE(g.st.tensors().contains(prefix + std::to_string(i))) << prefix << i;
      EXPECT_EQ(masks[i], *g.st.U8(prefix + std::to_string(i))) << prefix << i;
    }
    EXPECT_FALSE(g.st.tensors().contains(prefix + std::to_string(masks.size())));
  }
  ASSERT_OK_AND_ASSIGN(TrainState final_state, exec->GetState());
  ExpectSequenceTensorsWithin1e5(m, final_state.params, GoldenParams(g.st, m, "train.params."));
}

}  // namespace lockstep::testing
