// ModelFromSpec's named blocks and residual connections: Flax's nested names (params and
// batch_stats), the graph a residual builds (its branch, projection only where the shapes
// differ), the init keys of nested modules, and the errors a bad graph gives (the path and
// the shapes).
#include "core/model.h"
#include "core/model_spec.h"
#include "core/model_testing.h"
#include "core/rng/flax_rng.h"
#include "core/rng/random.h"
#include "core/spec/spec.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using testing::FromYaml;
using ::testing::HasSubstr;
using testing::Names;
using testing::StatusIs;

// Flax's ResNet block (examples/imagenet/models.py), with the spec's layers below it.
constexpr char kBlocks[] = R"(
model:
  input_shape: [8, 8, 3]
  blocks:
    ResNetBlock:
      args: {filters: null, strides: [1, 1]}
      layers:
        - residual:
            layers:
              - conv: {features: $filters, kernel_size: [3, 3], strides: $strides, use_bias: false}
              - batch_norm: {momentum: 0.9}
              - relu
              - conv: {features: $filters, kernel_size: [3, 3], use_bias: false}
              - batch_norm: {momentum: 0.9}
            projection:
              - conv: {features: $filters, kernel_size: [1, 1], strides: $strides, use_bias: false, name: conv_proj}
              - batch_norm: {momentum: 0.9, name: norm_proj}
        - relu
)";

std::string WithLayers(const std::string& layers) { return std::string(kBlocks) + layers; }

constexpr char kResNet[] = R"(  layers:
    - conv: {features: 4, kernel_size: [3, 3], use_bias: false}
    - batch_norm: {momentum: 0.9}
    - relu
    - block: {module: ResNetBlock, args: {filters: 4}}
    - block: {module: ResNetBlock, args: {filters: 8, strides: [2, 2]}}
    - avg_pool: {window_shape: [4, 4]}
    - flatten
    - dense: {features: 10}
)";

TEST(ModelBlocks, ParamsAndBatchStatsNestAsFlaxNamesThem) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml(WithLayers(kResNet)));
  EXPECT_THAT(Names(m.layout()),
              ElementsAre("Conv_0/kernel", "BatchNorm_0/scale", "BatchNorm_0/bias",
                          "ResNetBlock_0/Conv_0/kernel", "ResNetBlock_0/BatchNorm_0/scale",
                          "ResNetBlock_0/BatchNorm_0/bias", "ResNetBlock_0/Conv_1/kernel",
                          "ResNetBlock_0/BatchNorm_1/scale", "ResNetBlock_0/BatchNorm_1/bias",
                          "ResNetBlock_1/Conv_0/kernel", "ResNetBlock_1/BatchNorm_0/scale",
                          "ResNetBlock_1/BatchNorm_0/bias", "ResNetBlock_1/Conv_1/kernel",
                          "ResNetBlock_1/BatchNorm_1/scale", "ResNetBlock_1/BatchNorm_1/bias",
                          "ResNetBlock_1/conv_proj/kernel", "ResNetBlock_1/norm_proj/scale",
                          "ResNetBlock_1/norm_proj/bias", "Dense_0/kernel", "Dense_0/bias"));
  const std::vector<std::string> stats = Names(m.stats_layout());
  ASSERT_EQ(stats.size(), 12u);
  EXPECT_EQ(stats[2], "ResNetBlock_0/BatchNorm_0/mean");
  EXPECT_EQ(stats[11], "ResNetBlock_1/norm_proj/var");
  EXPECT_EQ(m.layout().entries()[15].shape, (std::vector<int64_t>{1, 1, 4, 8}));
}

TEST(ModelBlocks, AResidualBranchesAndAddsWithAProjectionOnlyWhereShapesDiffer) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml(WithLayers(kResNet)));
  const auto& l = m.layers();
  // 0-2 stem; 3-7 block 0's layers, 8 its add, 9 relu; 10-14 block 1's layers, 15-16 its
  // projection, 17 the add, 18 relu; pool, flatten, dense.
  ASSERT_EQ(l.size(), 22u);
  EXPECT_EQ(l[3].src, 2);  // the block's input
  EXPECT_EQ(l[8].kind, LayerKind::kAdd);
  EXPECT_EQ(l[8].src, 7);
  EXPECT_EQ(l[8].residual, 2);  // identity: same shape
  EXPECT_EQ(l[10].src, 9);
  EXPECT_EQ(l[15].name, "ResNetBlock_1/conv_proj");
  EXPECT_EQ(l[15].src, 9);  // the projection reads the block's input
  EXPECT_EQ(DimsString(l[16].out), "[4, 4, 8]");
  EXPECT_EQ(l[17].kind, LayerKind::kAdd);
  EXPECT_EQ(l[17].src, 14);
  EXPECT_EQ(l[17].residual, 16);
  EXPECT_EQ(l[18].src, 17);
  EXPECT_EQ(m.num_classes(), 10);
}

TEST(ModelBlocks, NestedModulesDrawInitKeysFromTheirWholePath) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml(WithLayers(kResNet)));
  const rng::Key key = {3, 7};
  const std::vector<float> params = m.Init(key, rng::Impl::kPartitionable);
  const ParamEntry& k = m.layout().entries()[15];  // ResNetBlock_1/conv_proj/kernel
  std::vector<float> want(k.size);
  rng::TruncatedNormal(rng::FlaxMakeRng(key, "ResNetBlock_1conv_proj", 1),
                       rng::Impl::kPartitionable, -2.0f, 2.0f, want);
  const float stddev = std::sqrt(1.0f / 4.0f) / 0.87962566103423978f;  // fan_in 1*1*4
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(params[k.offset + i], want[i] * stddev);
}

TEST(ModelBlocks, ATopLevelResidualAndBareLayersInItsLists) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml(R"(
model:
  input_shape: [4, 4, 2]
  layers:
    - conv: {features: 2, kernel_size: [1, 1]}
    - residual: {layers: [relu, {conv: {features: 2, kernel_size: [3, 3]}}]}
    - flatten
    - dense: {features: 3}
)"));
  ASSERT_EQ(m.layers().size(), 6u);
  EXPECT_EQ(m.layers()[1].kind, LayerKind::kRelu);
  EXPECT_EQ(m.layers()[3].kind, LayerKind::kAdd);
  EXPECT_EQ(m.layers()[3].residual, 0);
  EXPECT_EQ(m.layers()[2].name, "Conv_1");
}

TEST(ModelBlocks, BadGraphsNameThePathAndTheShapes) {
  const std::string plain = R"(
model:
  input_shape: [8, 8, 3]
  blocks:
    Plain:
      args: {filters: 4}
      layers:
        - conv: {features: 3, kernel_size: [1, 1]}
        - residual: {layers: [{conv: {features: $filters, kernel_size: [3, 3]}}]}
  layers:
    - block: {module: Plain, args: {filters: 8}}
    - flatten
    - dense: {features: 10}
)";
  EXPECT_THAT(FromYaml(plain).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("model.blocks.Plain.layers[1].residual: layers(x) is "
                                       "[8, 8, 8] but x is [8, 8, 3]"),
                             HasSubstr("(in Plain_0 from model.layers[0])"))));
  // A projection that does not reach the layers' shape.
  EXPECT_THAT(FromYaml(R"(
model:
  input_shape: [8, 8, 3]
  layers:
    - residual:
        layers: [{conv: {features: 4, kernel_size: [3, 3], strides: [2, 2]}}]
        projection: [{conv: {features: 4, kernel_size: [1, 1]}}]
    - flatten
    - dense: {features: 10}
)")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[0].residual.projection: gives [8, 8, 4] for x "
                                 "[8, 8, 3]; the addition needs layers(x)'s shape [4, 4, 4]")));
}

TEST(ModelBlocks, UnknownBlocksRecursionAndBadArgsAreInvalid) {
  auto model = [](const std::string& blocks, const std::string& call) {
    return FromYaml(absl::StrCat("model:\n  input_shape: [4, 4, 2]\n  blocks:\n", blocks,
                                 "  layers:\n    - ", call,
                                 "\n    - flatten\n"
                                 "    - dense: {features: 10}\n"));
  };
  const std::string a = R"(    A:
      args: {n: 2}
      layers: [{conv: {features: $n, kernel_size: [1, 1]}}]
)";
  EXPECT_THAT(model(a, "block: {module: B}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[0].block.module: unknown block \"B\" "
                                 "(model.blocks defines A)")));
  const std::string cycle = R"(    A:
      layers: [{block: {module: B}}]
    B:
      layers: [relu, {block: {module: A}}]
)";
  EXPECT_THAT(model(cycle, "block: {module: A}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("model.blocks.B.layers[1].block.module: block \"A\" uses "
                                       "itself (A -> B -> A)"),
                             HasSubstr("(in A_0 from model.layers[0])"))));
  EXPECT_THAT(model(a, "block: {module: A, args: {m: 3}}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[0].block.args.m: not an argument of A (its "
                                 "args: n)")));
  const std::string required = R"(    A:
      args: {n: null}
      layers: [{conv: {features: $n, kernel_size: [1, 1]}}]
)";
  EXPECT_THAT(model(required, "block: {module: A}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[0].block.args.n: required by A")));
  const std::string typo = R"(    A:
      args: {n: 2}
      layers: [{conv: {features: $m, kernel_size: [1, 1]}}]
)";
  EXPECT_THAT(model(typo, "block: {module: A}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.blocks.A.layers[0].conv.features: \"$m\" is not an "
                                 "argument of A (its args: n)")));
  const std::string field = R"(    A:
      layers: [{conv: {features: 2, kernel_sise: [1, 1]}}]
)";
  EXPECT_THAT(model(field, "block: {module: A}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.blocks.A.layers[0].conv.kernel_sise: unknown field")));
  EXPECT_THAT(model(a, "block: {module: A, args: {n: 0}}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.blocks.A.layers[0].conv.features: 0 is not in")));
}

TEST(ModelBlocks, ModuleNamesAreUniqueInTheirScope) {
  EXPECT_THAT(FromYaml(R"(
model:
  input_shape: [4, 4, 2]
  layers:
    - conv: {features: 2, kernel_size: [1, 1], name: Conv_1}
    - conv: {features: 2, kernel_size: [1, 1]}
    - conv: {features: 2, kernel_size: [1, 1]}
    - flatten
    - dense: {features: 10}
)")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[2].conv: the module name \"Conv_1\" is taken")));
  EXPECT_THAT(FromYaml(R"(
model:
  input_shape: [4, 4, 2]
  layers:
    - conv: {features: 2, kernel_size: [1, 1], name: my.conv}
    - flatten
    - dense: {features: 10}
)")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[0].conv.name: \"my.conv\" is not a name")));
}

TEST(ModelBlocks, UnknownFieldsOfABlockDefinitionAreNamedAtParse) {
  EXPECT_THAT(ParseSpec(R"(
model:
  blocks:
    A: {layers: [relu], residual: {}}
  layers: [{block: {module: A}}]
)",
                        "s.yaml")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.blocks.A.residual: unknown field")));
}

TEST(ModelBlocks, TheResNetExampleFitsFashionMnistWithFlaxsParamCount) {
  ASSERT_OK_AND_ASSIGN(v1::JobSpec spec, LoadSpecFile(testing::SourcePath("examples/resnet.yaml")));
  ASSERT_OK_AND_ASSIGN(spec, Validate(spec));
  EXPECT_OK(CheckModelFitsInstalledDataset(spec));
  ASSERT_OK_AND_ASSIGN(Model m, ModelFromSpec(spec.model()));
  EXPECT_EQ(m.layout().total(), 174970u);  // flax: sum of the params' sizes
  EXPECT_EQ(m.layout().entries().back().name, "Dense_0/bias");
  EXPECT_EQ(m.stats_layout().entries().back().name, "ResNetBlock_5/BatchNorm_1/var");
}

}  // namespace
}  // namespace lockstep
