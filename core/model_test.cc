// Model: layer lists from specs (shapes, Flax names, parameter layout, padding), the
// presets as layer lists, and the errors a bad model gives (the field and the shapes).
#include "core/model.h"

#include "core/model_testing.h"
#include "core/rng/threefry.h"
#include "core/spec/spec.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::AllOf;
using testing::FromYaml;
using ::testing::HasSubstr;
using testing::ParamNames;
using testing::StatusIs;

TEST(Model, LayersFromASpecHaveFlaxNamesShapesAndPadding) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml(R"(
model:
  input_shape: [12, 10, 3]
  layers:
    - conv: {features: 8, kernel_size: [3, 3], strides: [2, 2], padding: VALID, use_bias: false}
    - gelu: {}
    - conv: {features: 6, kernel_size: [3, 3], strides: [2, 2]}
    - layer_norm: {}
    - max_pool: {window_shape: [2, 2], padding: SAME}
    - relu
    - flatten:
    - dense: {features: 16}
    - dropout: {rate: 0.5}
    - dense: {features: 10, use_bias: false}
)"));
  const auto& l = m.layers();
  ASSERT_EQ(l.size(), 10u);
  EXPECT_EQ(DimsString(l[0].out), "[5, 4, 8]");  // (12 - 3) / 2 + 1, (10 - 3) / 2 + 1
  EXPECT_EQ(DimsString(l[2].out), "[3, 2, 6]");  // ceil(5 / 2), ceil(4 / 2)
  // SAME at stride 2, 3x3: 5 rows are padded by 2 (one before, one after), 4 columns by 1
  // (after: the odd one goes last).
  EXPECT_EQ(l[2].window.pad_top, 1);
  EXPECT_EQ(l[2].window.pad_bottom, 1);
  EXPECT_EQ(l[2].window.pad_left, 0);
  EXPECT_EQ(l[2].window.pad_right, 1);
  EXPECT_EQ(l[1].kind, LayerKind::kActivation);
  EXPECT_EQ(l[1].activation, Activation::kGeluTanh);
  EXPECT_EQ(DimsString(l[4].out), "[3, 2, 6]");  // stride 1, SAME
  EXPECT_EQ(l[4].window.pad_bottom, 1);
  EXPECT_EQ(DimsString(l[6].out), "[36]");
  EXPECT_EQ(l[8].name, "Dropout_0");
  EXPECT_EQ(l[8].keep, 0.5f);
  EXPECT_EQ(ParamNames(m),
            (std::vector<std::string>{"Conv_0/kernel", "Conv_1/kernel", "Conv_1/bias",
                                      "LayerNorm_0/scale", "LayerNorm_0/bias", "Dense_0/kernel",
                                      "Dense_0/bias", "Dense_1/kernel"}));
  EXPECT_EQ(m.layout().entries()[0].shape, (std::vector<int64_t>{3, 3, 3, 8}));
  EXPECT_EQ(m.layout().entries()[5].shape, (std::vector<int64_t>{36, 16}));
  EXPECT_EQ(m.num_classes(), 10);
  // LayerNorm's scale starts at one, its bias at zero.
  const std::vector<float> p = m.Init({0, 1}, rng::Impl::kPartitionable);
  const ParamEntry& scale = m.layout().entries()[3];
  const ParamEntry& bias = m.layout().entries()[4];
  for (size_t i = 0; i < scale.size; ++i) EXPECT_EQ(p[scale.offset + i], 1.0f);
  for (size_t i = 0; i < bias.size; ++i) EXPECT_EQ(p[bias.offset + i], 0.0f);
}

TEST(Model, FlaxDefaults) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml(R"(
model:
  layers:
    - conv: {features: 4, kernel_size: [5, 5]}
    - avg_pool: {window_shape: [3, 3]}
    - layer_norm: {use_scale: false}
    - flatten: {}
    - dense: {features: 10}
)"));
  EXPECT_EQ(DimsString(m.input()), "[28, 28, 1]");
  const auto& l = m.layers();
  EXPECT_EQ(DimsString(l[0].out), "[28, 28, 4]");  // SAME, stride 1
  EXPECT_EQ(l[0].window.pad_top, 2);
  EXPECT_EQ(DimsString(l[1].out), "[26, 26, 4]");  // VALID, stride 1
  EXPECT_TRUE(l[1].count_include_pad);
  EXPECT_EQ(l[2].epsilon, 1e-6f);
  EXPECT_EQ(l[2].scale, -1);
  EXPECT_GE(l[2].bias, 0);
}

TEST(Model, PresetsAreTheirLayerLists) {
  ASSERT_OK_AND_ASSIGN(Model preset, FromYaml("model: {kind: cnn}"));
  ASSERT_OK_AND_ASSIGN(Model written, FromYaml(R"(
model:
  input_shape: [28, 28, 1]
  layers:
    - conv: {features: 32, kernel_size: [3, 3]}
    - relu: {}
    - avg_pool: {window_shape: [2, 2], strides: [2, 2]}
    - conv: {features: 64, kernel_size: [3, 3]}
    - relu: {}
    - avg_pool: {window_shape: [2, 2], strides: [2, 2]}
    - flatten: {}
    - dense: {features: 256}
    - relu: {}
    - dense: {features: 10}
)"));
  for (const Model* m : {&preset, &written}) {
    EXPECT_EQ(ParamNames(*m), ParamNames(Model::Cnn()));
    EXPECT_EQ(m->layout().total(), 824458u);
    EXPECT_EQ(m->Init({0, 7}, rng::Impl::kPartitionable),
              Model::Cnn().Init({0, 7}, rng::Impl::kPartitionable));
  }
  ASSERT_OK_AND_ASSIGN(Model mlp,
                       FromYaml("model: {kind: mlp, hidden: [32, 16], dropout_rate: 0.1}"));
  const Model want = Model::Mlp({32, 16}, 0.1);
  ASSERT_EQ(mlp.layers().size(), want.layers().size());
  for (size_t i = 0; i < want.layers().size(); ++i) {
    EXPECT_EQ(mlp.layers()[i].kind, want.layers()[i].kind);
    EXPECT_EQ(mlp.layers()[i].name, want.layers()[i].name);
    EXPECT_EQ(mlp.layers()[i].keep, want.layers()[i].keep);
  }
  // A preset on another input shape.
  ASSERT_OK_AND_ASSIGN(Model cnn32, FromYaml("model: {kind: cnn, input_shape: [32, 32, 3]}"));
  EXPECT_EQ(cnn32.layout().entries()[0].shape, (std::vector<int64_t>{3, 3, 3, 32}));
  EXPECT_EQ(DimsString(cnn32.layers()[6].out), "[4096]");
}

struct BadModel {
  const char* yaml;
  std::vector<const char*> message;  // substrings of the error
};

class ModelInvalid : public ::testing::TestWithParam<BadModel> {};

TEST_P(ModelInvalid, NamesTheFieldAndTheShapes) {
  absl::StatusOr<Model> m = FromYaml(GetParam().yaml);
  ASSERT_FALSE(m.ok()) << GetParam().yaml;
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
  for (const char* want : GetParam().message) {
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(want));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ModelInvalid,
    ::testing::Values(
        BadModel{"model: {layers: [conv: {features: 4, kernel_size: [3, 3]}, dense: {features: "
                 "10}]}",
                 {"model.layers[1].dense", "[28, 28, 4] is not flat", "flatten"}},
        BadModel{"model: {input_shape: [4, 4, 1], layers: [max_pool: {window_shape: [5, 5]}, "
                 "flatten, dense: {features: 10}]}",
                 {"model.layers[0].max_pool.window_shape",
                  "[5, 5] is larger than the input [4, "
                  "4, 1]"}},
        BadModel{"model: {layers: [flatten, dense: {features: 0}]}",
                 {"model.layers[1].dense.features", "0 is not in [1,"}},
        BadModel{"model: {layers: [conv: {features: 2, kernel_size: [3, 3], padding: FULL}]}",
                 {"model.layers[0].conv.padding", "unknown padding \"FULL\""}},
        BadModel{"model: {layers: [conv: {features: 2, kernel_size: [3]}]}",
                 {"model.layers[0].conv.kernel_size", "[3] has 1 values"}},
        BadModel{"model: {layers: [conv: {features: 2, kernel_size: [3, 3], strides: [0, 1]}]}",
                 {"model.layers[0].conv.strides"}},
        BadModel{"model: {layers: [conv: {features: 10, kernel_size: [28, 28], padding: VALID}]}",
                 {"model.layers", "the output is [1, 1, 10]", "flat logits"}},
        BadModel{"model: {layers: [flatten, dense: {features: 1}]}",
                 {"model.layers", "the output is [1]"}},
        BadModel{"model: {layers: [flatten, dense: {features: 10}, conv: {features: 2, "
                 "kernel_size: [1, 1]}]}",
                 {"model.layers[2].conv", "the input [10] is flat"}},
        BadModel{"model: {layers: [flatten, relu]}", {"model.layers", "no layer has parameters"}},
        BadModel{"model: {input_shape: [10, 10], layers: [flatten]}",
                 {"model.input_shape", "[10, 10] has 2 values"}},
        BadModel{"model: {kind: cnn, layers: [flatten]}", {"model.kind, model.layers"}},
        BadModel{"model: {layers: [{}]}", {"model.layers[0]", "empty"}},
        BadModel{"model: {layers: [flatten, dropout: {rate: 1.0}, dense: {features: 10}]}",
                 {"model.layers[1].dropout.rate"}},
        BadModel{"model: {layers: [flatten, layer_norm: {epsilon: 0}, dense: {features: 10}]}",
                 {"model.layers[1].layer_norm.epsilon"}},
        BadModel{"model: {kind: cnn, input_shape: [2, 2, 1]}",
                 {"model.input_shape", "does not fit model.kind \"cnn\"", "avg_pool"}},
        BadModel{"model: {layers: [flatten, batch_norm: {momentum: 2}, dense: {features: 10}]}",
                 {"model.layers[1].batch_norm.momentum"}},
        BadModel{"model: {layers: [flatten, batch_norm: {momentum: 1}, dense: {features: 10}]}",
                 {"model.layers[1].batch_norm.momentum", "not in [0, 1)"}},
        BadModel{"model: {layers: [flatten, dense: {features: 10}, batch_norm: {epsilon: 0}]}",
                 {"model.layers[2].batch_norm.epsilon", "not in (0, 1)"}}));

TEST(Model, BatchNormHasFlaxParamsAndBatchStats) {
  ASSERT_OK_AND_ASSIGN(
      Model m, FromYaml("model: {input_shape: [4, 4, 2], layers: [conv: {features: 3, kernel_size: "
                        "[3, 3]}, batch_norm: {momentum: 0.9}, flatten, dense: {features: 10}, "
                        "batch_norm: {use_scale: false, epsilon: 0.001}]}"));
  const auto& l = m.layers();
  ASSERT_EQ(l[1].kind, LayerKind::kBatchNorm);
  EXPECT_EQ(l[1].name, "BatchNorm_0");
  EXPECT_EQ(l[4].name, "BatchNorm_1");
  EXPECT_EQ(l[1].momentum, 0.9f);
  EXPECT_EQ(l[1].one_minus_momentum, static_cast<float>(1.0 - 0.9));
  EXPECT_EQ(l[4].epsilon, 0.001f);
  std::vector<std::string> names;
  for (const ParamEntry& e : m.layout().entries()) names.push_back(e.name);
  EXPECT_THAT(names, ::testing::ElementsAre("Conv_0/kernel", "Conv_0/bias", "BatchNorm_0/scale",
                                            "BatchNorm_0/bias", "Dense_0/kernel", "Dense_0/bias",
                                            "BatchNorm_1/bias"));
  names.clear();
  for (const ParamEntry& e : m.stats_layout().entries()) names.push_back(e.name);
  EXPECT_THAT(names, ::testing::ElementsAre("BatchNorm_0/mean", "BatchNorm_0/var",
                                            "BatchNorm_1/mean", "BatchNorm_1/var"));
  EXPECT_EQ(m.stats_layout().total(), 26u);
  const std::vector<float> stats = m.InitStats();
  EXPECT_EQ(stats, std::vector<float>({0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0,
                                       0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  const std::vector<float> params = m.Init({0, 1}, rng::Impl::kPartitionable);
  const ParamEntry& scale = m.layout().entries()[2];
  EXPECT_EQ(
      std::vector<float>(params.begin() + scale.offset, params.begin() + scale.offset + scale.size),
      std::vector<float>({1, 1, 1}));
}

TEST(Model, PresetsHaveNoBatchStats) {
  EXPECT_EQ(Model::Cnn().stats_layout().total(), 0u);
  EXPECT_EQ(Model::Mlp({32}, 0.1).stats_layout().total(), 0u);
}

TEST(Model, SpecErrorsInLayersNameTheirPath) {
  EXPECT_THAT(ParseSpec("model: {layers: [conv: {features: 2, kernle_size: [3, 3]}]}", "s"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("model.layers[0].conv.kernle_size: unknown field"),
                             HasSubstr("kernel_size"))));
  EXPECT_THAT(ParseSpec("model: {layers: [flatten, {relu: {}, tanh: {}}]}", "s"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[1]: one layer per entry, found 2 (relu, tanh)")));
  EXPECT_THAT(ParseSpec("model: {layers: [softmax]}", "s"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[0].softmax: unknown field")));
  // JSON too.
  ASSERT_OK_AND_ASSIGN(
      v1::JobSpec spec,
      ParseSpec(R"({"model": {"layers": [{"flatten": {}}, {"dense": {"features": 10}}]}})", "j"));
  EXPECT_EQ(spec.model().layers(1).dense().features(), 10u);
}

TEST(Model, FlopsCountConvAndDenseAsBefore) {
  const Model cnn = Model::Cnn();
  double matmul = 0;
  for (const Layer& l : cnn.layers()) {
    if (l.kind == LayerKind::kConv) matmul += 2.0 * l.out.size() * 9 * l.in.c;
    if (l.kind == LayerKind::kDense) matmul += 2.0 * l.in.size() * l.out.c;
  }
  EXPECT_GT(cnn.ForwardFlopsPerSample(), matmul);
  EXPECT_LT(cnn.ForwardFlopsPerSample(), 1.01 * matmul);  // the rest is elementwise
}

}  // namespace
}  // namespace lockstep
