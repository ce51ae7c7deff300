// Sequence layers in a spec (embed, position_embed, multi_head_attention; dense, layer_norm
// and dropout on [T, F]): shapes, Flax's names and layout, the token-level outputs, and the
// errors a bad sequence model gives (the field and the shapes).
#include "core/model.h"
#include "core/model_testing.h"
#include "core/spec/spec.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using testing::FromYaml;
using ::testing::HasSubstr;
using testing::ParamNames;
using testing::StatusIs;

TEST(SequenceModel, LayersHaveFlaxNamesShapesAndOutputs) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml(R"(
model:
  input_shape: [10]
  layers:
    - embed: {num_embeddings: 30, features: 16}
    - position_embed: {max_len: 12}
    - multi_head_attention: {num_heads: 2, qkv_features: 8, out_features: 12, causal: true}
    - layer_norm
    - dense: {features: 30}
)"));
  EXPECT_THAT(
      ParamNames(m),
      ElementsAre(
          "Embed_0/embedding", "Embed_1/embedding", "MultiHeadDotProductAttention_0/query/kernel",
          "MultiHeadDotProductAttention_0/query/bias", "MultiHeadDotProductAttention_0/key/kernel",
          "MultiHeadDotProductAttention_0/key/bias", "MultiHeadDotProductAttention_0/value/kernel",
          "MultiHeadDotProductAttention_0/value/bias", "MultiHeadDotProductAttention_0/out/kernel",
          "MultiHeadDotProductAttention_0/out/bias", "LayerNorm_0/scale", "LayerNorm_0/bias",
          "Dense_0/kernel", "Dense_0/bias"));
  const auto& e = m.layout().entries();
  EXPECT_EQ(e[0].shape, (std::vector<int64_t>{30, 16}));
  EXPECT_EQ(e[1].shape, (std::vector<int64_t>{12, 16}));
  EXPECT_EQ(e[2].shape, (std::vector<int64_t>{16, 2, 4}));
  EXPECT_EQ(e[3].shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(e[8].shape, (std::vector<int64_t>{2, 4, 12}));
  EXPECT_EQ(e[12].shape, (std::vector<int64_t>{12, 30}));  // dense on the last axis
  EXPECT_EQ(DimsString(m.layers()[0].out), "[10, 16]");
  EXPECT_EQ(DimsString(m.layers()[2].out), "[10, 12]");
  EXPECT_TRUE(m.layers()[2].causal);
  EXPECT_EQ(m.positions(), 10);
  EXPECT_EQ(m.num_classes(), 30);
  EXPECT_EQ(m.vocabulary(), 30);
}

TEST(SequenceModel, FlattenEndsTheSequence) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml(R"(
model:
  input_shape: [4]
  layers: [{embed: {num_embeddings: 5, features: 3}}, flatten, {dense: {features: 2}}]
)"));
  EXPECT_EQ(m.positions(), 1);
  EXPECT_EQ(m.layout().entries()[1].shape, (std::vector<int64_t>{12, 2}));
}

TEST(SequenceModel, InitIsScaledNormalForEmbeddingsAndFanInPerDenseGeneral) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml(R"(
model:
  input_shape: [8]
  layers:
    - embed: {num_embeddings: 400, features: 64}
    - multi_head_attention: {num_heads: 4}
    - dense: {features: 3}
)"));
  const std::vector<float> p = m.Init({0, 42}, rng::Impl::kPartitionable);
  auto stddev = [&](int index) {
    const ParamEntry& e = m.layout().entries()[index];
    double sq = 0;
    for (size_t i = 0; i < e.size; ++i) sq += double{p[e.offset + i]} * p[e.offset + i];
    return std::sqrt(sq / e.size);
  };
  EXPECT_NEAR(stddev(0), 1.0 / 8.0, 0.01);  // sqrt(1 / features)
  EXPECT_NEAR(stddev(1), 1.0 / 8.0, 0.01);  // query: lecun_normal, fan_in 64
  EXPECT_NEAR(stddev(7), 1.0 / 8.0, 0.01);  // out: fan_in heads * head_dim = 64
}

TEST(SequenceModel, ErrorsNameTheFieldAndShapes) {
  EXPECT_THAT(FromYaml(R"(
model: {input_shape: [8], layers: [{dense: {features: 4}}, {embed: {num_embeddings: 5, features: 3}}]}
)")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[1].embed: takes token ids: it must be the first")));
  EXPECT_THAT(FromYaml(R"(
model: {input_shape: [8], layers: [{embed: {num_embeddings: 0, features: 3}}]}
)")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[0].embed.num_embeddings: 0 is not in")));
  EXPECT_THAT(FromYaml(R"(
model:
  input_shape: [8]
  layers: [{embed: {num_embeddings: 5, features: 6}}, {multi_head_attention: {num_heads: 4}}]
)")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[1].multi_head_attention.num_heads: 4 does not "
                                 "divide qkv_features 6")));
  EXPECT_THAT(
      FromYaml(R"(
model:
  input_shape: [8]
  layers: [{embed: {num_embeddings: 5, features: 6}}, {position_embed: {max_len: 4}}]
)")
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("model.layers[1].position_embed.max_len: 4"), HasSubstr("[8, 6]"))));
  EXPECT_THAT(
      FromYaml(R"(
model:
  input_shape: [8]
  layers: [{embed: {num_embeddings: 5, features: 6}}, {max_pool: {window_shape: [2, 2]}}]
)")
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("the input [8, 6] is a sequence [T, F]; this layer needs an image")));
  EXPECT_THAT(FromYaml(R"(
model: {input_shape: [4, 4, 1], layers: [flatten, {multi_head_attention: {num_heads: 1}}]}
)")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the input [16] is not a sequence [T, F]")));
  EXPECT_THAT(FromYaml(R"(
model:
  input_shape: [8]
  layers: [{embed: {num_embeddings: 5, features: 6}}, {multi_head_attention: {num_heads: 2, dropout_rate: 1}}]
)")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("multi_head_attention.dropout_rate: 1 is not in [0, 1)")));
}

}  // namespace
}  // namespace lockstep
