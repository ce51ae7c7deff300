// The whole training step on the CUDA backend: against the CPU backend (the CNN, an MLP
// with dropout, a BatchNorm convnet with and without biases before its norms, a
// transformer decoder block on tokens and a vision transformer; adam, sgd with momentum, and sgd
// with Nesterov momentum, a schedule and clipping), graph replay against eager execution, and the
// JAX/Flax/optax golden files that tests/golden_test.cc, golden_layers_test.cc and
// golden_sequence_test.cc check the CPU against; in bfloat16, the bf16 goldens
// (golden_bf16_test.cc's) and graph replay.
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "core/data/random_dataset.h"
#include "core/data/token_dataset.h"
#include "core/io/safetensors.h"
#include "core/model_spec.h"
#include "core/optimizer_spec.h"
#include "core/plan.h"
#include "core/spec/spec.h"
#include "core/step.h"
#include "tests/golden.h"
#include "tests/golden_bf16.h"
#include "workers/cuda/cuda_backend_impl.h"
#include "workers/cuda/cuda_testing.h"

namespace lockstep {
namespace {

using testing::CudaTest;
using testing::GoldenDataset;
using testing::GoldenModelSpec;
using testing::GoldenParams;
using testing::GoldenPath;
using testing::MaxAbsDiff;
using testing::RelativeL2;

// "adam", "sgd" (with momentum), or "sgd_schedule_clip": sgd with Nesterov momentum, a
// cosine decay (a new learning rate every step, which a replayed graph must read) and
// clipping at a norm the gradients exceed.
Optimizer MakeOptimizer(const std::string& kind) {
  v1::OptimizerSpec spec;
  if (kind == "sgd_schedule_clip") {
    spec.set_kind("sgd");
    spec.set_momentum(0.9);
    spec.set_nesterov(true);
    spec.set_clip_by_global_norm(0.5);
    auto* cosine = spec.mutable_schedule()->mutable_cosine_decay();
    cosine->set_init_value(0.05);
    cosine->set_decay_steps(6);
    return *OptimizerFromSpec(spec);
  }
  spec.set_kind(kind);
  spec.set_learning_rate(kind == "sgd" ? 0.05 : 1e-3);
  if (kind == "sgd") spec.set_momentum(0.9);
  return *OptimizerFromSpec(spec);
}

// A pre-norm decoder block on bytes, examples/char-transformer.yaml's made small: embed,
// position_embed, causal attention with dropout and an MLP with dropout in residual
// connections, a final LayerNorm and the token-level loss over [T, 256]. The attention
// has no biases: the true gradient of its key/bias is 0, which adam would turn into
// updates of either backend's rounding noise (see ExpectSequenceTensorsWithin1e5).
constexpr char kDecoder[] = R"(
model:
  input_shape: [16]
  layers:
    - embed: {num_embeddings: 256, features: 32}
    - position_embed: {}
    - residual:
        layers:
          - layer_norm: {}
          - multi_head_attention: {num_heads: 4, causal: true, dropout_rate: 0.1, use_bias: false}
    - residual:
        layers:
          - layer_norm: {}
          - dense: {features: 64}
          - gelu
          - dense: {features: 32}
          - dropout: {rate: 0.1}
    - layer_norm
    - dense: {features: 256}
)";

// A vision transformer on 28x28 images, examples/vit.yaml's made small: 7x7 patches as 16
// tokens, the class token, ViT's position embeddings, an encoder block with attention
// dropout (no biases, as kDecoder) and the class token's output to the head.
constexpr char kVit[] = R"(
model:
  input_shape: [28, 28, 1]
  layers:
    - conv: {features: 32, kernel_size: [7, 7], strides: [7, 7], padding: VALID}
    - to_sequence
    - class_token
    - add_position_embs: {}
    - residual:
        layers:
          - layer_norm: {}
          - multi_head_attention: {num_heads: 4, dropout_rate: 0.1, use_bias: false}
    - residual:
        layers:
          - layer_norm: {}
          - dense: {features: 64}
          - gelu
          - dense: {features: 32}
          - dropout: {rate: 0.1}
    - layer_norm
    - sequence_pool: {method: first}
    - dense: {features: 10}
)";

// "cnn", "mlp", "bn": a convnet with BatchNorm after a conv and after a dense layer, both
// without biases (as in Flax's ResNet), "bn_bias": the same with them, or "decoder"
// (kDecoder), or "vit" (kVit). A bias right before a BatchNorm has a true gradient of 0 (the norm
// subtracts any shift): its gradient is each backend's rounding noise, summed in another order,
// which adam turns into updates of +-lr and the running means then carry (see PreNormBiases...).
Model MakeModel(const std::string& name) {
  // "decoder_bf16" and "vit_bf16": the same in mixed precision (model.dtype: bfloat16);
  // "decoder_bf16_sdpa": that without attention dropout, so that its attention runs as the
  // backend's fused attention (cuDNN's SDPA) where it has it.
  const bool sdpa = name.ends_with("_sdpa");
  const std::string bf16_name = sdpa ? name.substr(0, name.size() - 5) : name;
  const bool bf16 = bf16_name.ends_with("_bf16");
  const std::string base = bf16 ? bf16_name.substr(0, bf16_name.size() - 5) : bf16_name;
  if (base == "decoder" || base == "vit") {
    std::string yaml = base == "vit" ? kVit : kDecoder;
    if (bf16) yaml.replace(yaml.find("model:\n"), 7, "model:\n  dtype: bfloat16\n");
    for (size_t at; sdpa && (at = yaml.find(", dropout_rate: 0.1")) != std::string::npos;) {
      yaml.erase(at, 19);
    }
    absl::StatusOr<v1::JobSpec> spec = ParseSpec(yaml, "model.yaml");
    EXPECT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<Model> m = ModelFromSpec(spec->model());
    EXPECT_TRUE(m.ok()) << m.status();
    return *std::move(m);
  }
  if (name == "bn" || name == "bn_bias") {
    const bool bias = name == "bn_bias";
    Model m({28, 28, 1});
    m.Conv(16, {3, 3}, {1, 1}, Padding::kSame, bias);
    m.BatchNorm();
    m.Relu();
    m.AvgPool({2, 2}, {2, 2});
    m.Flatten();
    m.Dense(64, bias);
    m.BatchNorm(0.9, 1e-3, true, false);
    m.Relu();
    m.Dense(10);
    return m;
  }
  return name == "cnn" ? Model::Cnn() : Model::Mlp({256, 128}, 0.3);
}

// n examples for `model_name`: windows of 16 random bytes (and their next bytes) for the
// decoder, random images otherwise.
Dataset MakeData(const std::string& model_name, int n, uint32_t seed) {
  if (!model_name.starts_with("decoder")) return RandomDataset(n, seed);
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> byte(0, 255);
  std::vector<int32_t> stream(size_t(n) * 16 + 1);
  for (int32_t& t : stream) t = byte(gen);
  absl::StatusOr<Dataset> data = WindowTokens(stream, 16, "stream", "cuda_step_test");
  EXPECT_TRUE(data.ok()) << data.status();
  return *std::move(data);
}

// One replica: an executor on a backend, with the dataset uploaded and fresh state.
struct Replica {
  std::unique_ptr<StepExecutor> exec;
  DeviceDataset data;
};

absl::StatusOr<Replica> MakeReplica(const Model& m, const Optimizer& opt, Backend* backend,
                                    const Dataset& data, int batch, bool graphs,
                                    const TrainState& init) {
  Replica r;
  ASSIGN_OR_RETURN(r.exec, StepExecutor::Create(m, opt, rng::Impl::kPartitionable, batch, backend,
                                                nullptr, {}, graphs));
  ASSIGN_OR_RETURN(r.data, r.exec->Upload(data));
  RETURN_IF_ERROR(r.exec->SetState(init));
  return r;
}

// The elements of `e` in a params or slot vector.
std::span<const float> Of(const std::vector<float>& v, const ParamEntry& e) {
  return {v.data() + e.offset, e.size};
}

// Four steps of `m` from the same state on the CPU and the CUDA backend, the losses,
// accuracies and dropout masks agreeing step by step; the end states and the evaluations
// of both.
struct BothBackends {
  TrainState want, got;  // CPU, CUDA
  EvalMetrics want_eval, got_eval;
};

void StepBoth(const std::string& model_name, const Model& m, const Optimizer& opt, Backend* cpu_b,
              Backend* cuda_b, BothBackends* out) {
  const int batch = 32;
  const Dataset data = MakeData(model_name, 256, 1);
  const auto impl = rng::Impl::kPartitionable;
  TrainingPlan plan(0, 1, impl, data.size, batch, 1);
  const TrainState init = TrainState::Create(m.Init(plan.init_key(), impl), opt, m.InitStats());
  ASSERT_OK_AND_ASSIGN(Replica cpu, MakeReplica(m, opt, cpu_b, data, batch, true, init));
  ASSERT_OK_AND_ASSIGN(Replica gpu, MakeReplica(m, opt, cuda_b, data, batch, true, init));
  for (int s = 0; s < 4; ++s) {
    const StepPlan p = plan.Next();
    ASSERT_OK_AND_ASSIGN(StepMetrics want, cpu.exec->Step(cpu.data, p.indices, p.keys[0]));
    ASSERT_OK_AND_ASSIGN(StepMetrics got, gpu.exec->Step(gpu.data, p.indices, p.keys[0]));
    EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::fabs(want.loss)) << "step " << s;
    EXPECT_NEAR(got.accuracy, want.accuracy, 1.0 / batch + 1e-6) << "step " << s;
    ASSERT_OK_AND_ASSIGN(auto want_masks, cpu.exec->DropoutMasks());
    ASSERT_OK_AND_ASSIGN(auto got_masks, gpu.exec->DropoutMasks());
    EXPECT_EQ(got_masks, want_masks) << "step " << s;
  }
  if (model_name == "mlp" || model_name == "decoder" || model_name == "vit") {
    ASSERT_OK_AND_ASSIGN(auto masks, gpu.exec->DropoutMasks());
    EXPECT_EQ(masks.size(), 2u);  // a transformer's: the attention weights' and the MLP's
  }
  ASSERT_OK_AND_ASSIGN(out->want, cpu.exec->GetState());
  ASSERT_OK_AND_ASSIGN(out->got, gpu.exec->GetState());
  EXPECT_EQ(out->got.step, 4);
  ASSERT_OK_AND_ASSIGN(out->want_eval, cpu.exec->Evaluate(cpu.data, 100));
  ASSERT_OK_AND_ASSIGN(out->got_eval, gpu.exec->Evaluate(gpu.data, 100));
  EXPECT_NEAR(out->got_eval.loss, out->want_eval.loss, 1e-5 * out->want_eval.loss);
  EXPECT_EQ(out->got_eval.count, out->want_eval.count);
}

class CudaStepTest : public CudaTest,
                     public ::testing::WithParamInterface<std::tuple<const char*, const char*>> {};

TEST_P(CudaStepTest, StepsMatchTheCpuBackend) {
  const auto [model_name, opt_name] = GetParam();
  const Model m = MakeModel(model_name);
  const Optimizer opt = MakeOptimizer(opt_name);
  BothBackends r;
  ASSERT_NO_FATAL_FAILURE(StepBoth(model_name, m, opt, cpu_.get(), cuda_.get(), &r));
  for (const ParamEntry& e : m.layout().entries()) {
    EXPECT_LE(RelativeL2(Of(r.got.params, e), Of(r.want.params, e)), 1e-5) << e.name;
    for (size_t i = 0; i < r.want.slots.size(); ++i) {
      EXPECT_LE(RelativeL2(Of(r.got.slots[i], e), Of(r.want.slots[i], e)), 1e-5)
          << e.name << " slot " << opt.slots()[i];
    }
  }
  EXPECT_LE(RelativeL2(r.got.batch_stats, r.want.batch_stats), 1e-5);
}

// The biases right before a BatchNorm (sgd with momentum: updates proportional to their
// gradients of rounding noise): within 1e-5 of their layer's kernel norm, as
// tests/cluster/equivalence_test.cc holds them against JAX; every other tensor, the
// momentum traces and the running statistics within 1e-5 relative L2.
TEST_F(CudaTest, PreNormBiasesStayWithinTheirKernelsRoundingOfTheCpu) {
  const Model m = MakeModel("bn_bias");
  const Optimizer opt = MakeOptimizer("sgd");
  BothBackends r;
  ASSERT_NO_FATAL_FAILURE(StepBoth("bn_bias", m, opt, cpu_.get(), cuda_.get(), &r));
  const auto& entries = m.layout().entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    const ParamEntry& e = entries[i];
    if (e.name != "Conv_0/bias" && e.name != "Dense_0/bias") {
      EXPECT_LE(RelativeL2(Of(r.got.params, e), Of(r.want.params, e)), 1e-5) << e.name;
      EXPECT_LE(RelativeL2(Of(r.got.slots[0], e), Of(r.want.slots[0], e)), 1e-5) << e.name;
      continue;
    }
    const ParamEntry& k = entries[i - 1];  // the layer's kernel
    ASSERT_EQ(k.name, e.name.substr(0, e.name.find('/')) + "/kernel");
    double norm = 0;
    for (size_t j = 0; j < k.size; ++j)
      norm += double{r.want.params[k.offset + j]} * r.want.params[k.offset + j];
    norm = std::sqrt(norm);
    EXPECT_LE(MaxAbsDiff(Of(r.got.params, e), Of(r.want.params, e)), 1e-5 * norm) << e.name;
    EXPECT_LE(MaxAbsDiff(Of(r.got.slots[0], e), Of(r.want.slots[0], e)), 1e-5 * norm) << e.name;
  }
  EXPECT_LE(RelativeL2(r.got.batch_stats, r.want.batch_stats), 1e-5);
}

// A CUDA graph replays exactly the kernels eager execution runs: bitwise equal.
void ExpectGraphReplayBitwiseEqualToEager(Backend* cuda, const std::string& model_name,
                                          const std::string& opt_name) {
  const Model m = MakeModel(model_name);
  const Optimizer opt = MakeOptimizer(opt_name);
  const int batch = 64;
  const Dataset data = MakeData(model_name, 512, 2);
  const auto impl = rng::Impl::kPartitionable;
  TrainingPlan plan(3, 4, impl, data.size, batch, 1);
  const TrainState init = TrainState::Create(m.Init(plan.init_key(), impl), opt, m.InitStats());
  ASSERT_OK_AND_ASSIGN(Replica graph, MakeReplica(m, opt, cuda, data, batch, true, init));
  ASSERT_OK_AND_ASSIGN(Replica eager, MakeReplica(m, opt, cuda, data, batch, false, init));
  for (int s = 0; s < 5; ++s) {
    const StepPlan p = plan.Next();
    ASSERT_OK_AND_ASSIGN(StepMetrics a, graph.exec->Step(graph.data, p.indices, p.keys[0]));
    ASSERT_OK_AND_ASSIGN(StepMetrics b, eager.exec->Step(eager.data, p.indices, p.keys[0]));
    EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(float)), 0) << "step " << s;
  }
  ASSERT_OK_AND_ASSIGN(TrainState a, graph.exec->GetState());
  ASSERT_OK_AND_ASSIGN(TrainState b, eager.exec->GetState());
  EXPECT_TRUE(testing::Bitwise(a.params, b.params));
  EXPECT_NE(a.params, init.params);  // the steps did update the params
  for (size_t i = 0; i < a.slots.size(); ++i) EXPECT_TRUE(testing::Bitwise(a.slots[i], b.slots[i]));
  EXPECT_TRUE(testing::Bitwise(a.batch_stats, b.batch_stats));
}

TEST_P(CudaStepTest, GraphReplayIsBitwiseEqualToEager) {
  const auto [model_name, opt_name] = GetParam();
  ExpectGraphReplayBitwiseEqualToEager(cuda_.get(), model_name, opt_name);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaStepTest,
                         ::testing::Combine(::testing::Values("cnn", "mlp", "bn", "decoder", "vit"),
                                            ::testing::Values("adam", "sgd", "sgd_schedule_clip")));

// The golden files (tools/reference, JAX on CPU) through the CUDA backend.
class CudaGradGolden : public CudaTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(CudaGradGolden, LossAndEveryGradientWithin1e5OfJax) {
  testing::ExpectGradientsMatchJax(cuda_.get(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, CudaGradGolden, ::testing::Values("cnn", "mlp"));

// A small ResNet (named blocks, residual connections, BatchNorm): the residual's Add and
// Copy, and the gradients added where its input branches.
TEST_F(CudaTest, ResNetLossAndEveryGradientWithin1e5OfJax) {
  testing::ExpectStatsModelGradientsMatchJax(cuda_.get(), "resnet_pmap2_sgd.safetensors");
}

class CudaTrainGolden : public CudaTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(CudaTrainGolden, TwentyDropoutStepsInAGraphMatchOptax) {
  testing::ExpectTrainingMatchesOptax(cuda_.get(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CudaTrainGolden, ::testing::Values("adam", "sgd"));

// optax beyond constants (tests/golden_optax_test.cc's files): schedules, Nesterov, clipping.
class CudaOptaxGolden : public CudaTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(CudaOptaxGolden, TwentyDropoutStepsInAGraphMatchOptax) {
  testing::ExpectTrainingMatchesGolden(cuda_.get(),
                                       std::string("optax_train_") + GetParam() + ".safetensors");
}

INSTANTIATE_TEST_SUITE_P(Options, CudaOptaxGolden,
                         ::testing::Values("sgd_nesterov_cosine", "adam_warmup_cosine_clip",
                                           "adamw_piecewise", "sgd_exponential_staircase",
                                           "sgd_clipped"));

// The layers models (tools/reference/golden_layers.py): every layer and option.
class CudaLayersGolden : public CudaTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(CudaLayersGolden, LossAndEveryGradientWithin1e5OfJax) {
  testing::ExpectLayersGradientsMatchJax(cuda_.get(), GetParam());
}

TEST_P(CudaLayersGolden, TwentyDropoutStepsInAGraphMatchOptax) {
  testing::ExpectLayersTrainingMatchesOptax(cuda_.get(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, CudaLayersGolden,
                         ::testing::Values("conv", "dense", "pool", "vit_token", "vit_gap"));

// The sequence models (tools/reference/golden_sequence.py): embed, position_embed,
// attention, a decoder block, the token-level loss.
class CudaSequenceGolden : public CudaTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(CudaSequenceGolden, TokenLossAndEveryGradientWithin1e5OfJax) {
  testing::ExpectSequenceGradientsMatchJax(cuda_.get(), GetParam());
}

TEST_P(CudaSequenceGolden, TwentyDropoutStepsInAGraphMatchOptax) {
  testing::ExpectSequenceTrainingMatchesOptax(cuda_.get(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, CudaSequenceGolden,
                         ::testing::Values("embed", "attention", "decoder"));

// Mixed precision (model.dtype: bfloat16) on a GPU that has bfloat16 kernels.
class CudaBf16Test : public CudaTest, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    const absl::Status bf16 = cuda_->Bf16Support();
    if (!bf16.ok()) GTEST_SKIP() << bf16.message();
  }
};

// The bf16 goldens (tests/golden_bf16.h, tools/reference/golden_bf16.py) through the CUDA
// backend: each family's bfloat16 step within bfloat16 rounding of JAX's and no less
// precise than it, as the CPU backend's (tests/golden_bf16_test.cc).
using CudaBf16Golden = CudaBf16Test;

TEST_P(CudaBf16Golden, StepWithinBf16RoundingOfJaxAndNoLessPrecise) {
  testing::ExpectBf16StepMatchesJax(cuda_.get(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Families, CudaBf16Golden,
                         ::testing::Values("cnn", "bn_convnet", "resnet", "decoder", "vit",
                                           "vit_gap"));

// A bfloat16 step replayed from its CUDA graph: bitwise the eager one, as in float32.
using CudaBf16StepTest = CudaBf16Test;

TEST_P(CudaBf16StepTest, GraphReplayIsBitwiseEqualToEager) {
  ExpectGraphReplayBitwiseEqualToEager(cuda_.get(), GetParam(), "adam");
}

INSTANTIATE_TEST_SUITE_P(Models, CudaBf16StepTest,
                         ::testing::Values("decoder_bf16", "vit_bf16", "decoder_bf16_sdpa"));

// A bfloat16 decoder without attention dropout, whose attention runs on cuDNN's fused
// attention (on by default), against the same job with it turned off (the batched GEMMs
// and the XLA sequence's roundings): four sgd steps' losses, the params' updates and the
// evaluation within bfloat16 rounding (1e-2 relative; relative L2 2e-2 for the updates).
TEST_F(CudaBf16Test, FusedAttentionStepsWithinBf16RoundingOfTheBatchedPath) {
  if (const std::string& off = CudaBackend::From(cuda_.get())->cudnn_off(); !off.empty()) {
    GTEST_SKIP() << "no fused attention without cuDNN: " << off;
  }
  const Model m = MakeModel("decoder_bf16_sdpa");
  const Optimizer opt = MakeOptimizer("sgd");
  const int batch = 32;
  EXPECT_TRUE(cuda_->FusedAttentionTakes({batch, 16, 4, 8, true}));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Backend> batched, NewCudaBackend(0));
  ASSERT_OK(batched->SetFusedAttention(false));
  EXPECT_FALSE(batched->FusedAttentionTakes({batch, 16, 4, 8, true}));
  const Dataset data = MakeData("decoder", 256, 1);
  const auto impl = rng::Impl::kPartitionable;
  TrainingPlan plan(0, 1, impl, data.size, batch, 1);
  const TrainState init = TrainState::Create(m.Init(plan.init_key(), impl), opt, m.InitStats());
  ASSERT_OK_AND_ASSIGN(Replica fused, MakeReplica(m, opt, cuda_.get(), data, batch, true, init));
  ASSERT_OK_AND_ASSIGN(Replica ref, MakeReplica(m, opt, batched.get(), data, batch, true, init));
  for (int s = 0; s < 4; ++s) {
    const StepPlan p = plan.Next();
    ASSERT_OK_AND_ASSIGN(StepMetrics a, fused.exec->Step(fused.data, p.indices, p.keys[0]));
    ASSERT_OK_AND_ASSIGN(StepMetrics b, ref.exec->Step(ref.data, p.indices, p.keys[0]));
    EXPECT_NEAR(a.loss, b.loss, 1e-2 * std::fabs(b.loss)) << "step " << s;
  }
  ASSERT_OK_AND_ASSIGN(TrainState a, fused.exec->GetState());
  ASSERT_OK_AND_ASSIGN(TrainState b, ref.exec->GetState());
  for (const ParamEntry& e : m.layout().entries()) {
    std::vector<float> da(e.size), db(e.size);
    for (size_t j = 0; j < e.size; ++j) {
      da[j] = a.params[e.offset + j] - init.params[e.offset + j];
      db[j] = b.params[e.offset + j] - init.params[e.offset + j];
    }
    EXPECT_LE(RelativeL2(da, db), 2e-2) << e.name << "'s update";
  }
  ASSERT_OK_AND_ASSIGN(EvalMetrics ea, fused.exec->Evaluate(fused.data, 100));
  ASSERT_OK_AND_ASSIGN(EvalMetrics eb, ref.exec->Evaluate(ref.data, 100));
  EXPECT_NEAR(ea.loss, eb.loss, 1e-2 * eb.loss);
}

}  // namespace
}  // namespace lockstep
