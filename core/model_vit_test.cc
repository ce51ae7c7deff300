// Vision transformer layers in a spec (to_sequence, class_token, add_position_embs,
// sequence_pool): Flax's names, shapes and initializers, and the errors a bad one gives.
#include <cmath>

#include "core/model.h"
#include "core/model_testing.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using testing::FromYaml;
using ::testing::HasSubstr;
using testing::ParamNames;
using testing::StatusIs;

constexpr char kVit[] = R"(
model:
  input_shape: [28, 28, 1]
  blocks:
    Encoder:
      layers:
        - add_position_embs: {name: posembed_input}
        - residual:
            layers: [layer_norm, {multi_head_attention: {num_heads: 2}}]
        - layer_norm: {name: encoder_norm}
  layers:
    - conv: {features: 16, kernel_size: [7, 7], strides: [7, 7], padding: VALID, name: embedding}
    - to_sequence
    - class_token
    - block: {module: Encoder, name: Transformer}
    - sequence_pool: {method: first}
    - dense: {features: 10, name: head}
)";

TEST(VitModel, LayersHaveViTsNamesAndShapes) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml(kVit));
  const std::vector<std::string> names = ParamNames(m);
  EXPECT_THAT(std::vector<std::string>(names.begin(), names.begin() + 4),
              ElementsAre("embedding/kernel", "embedding/bias", "cls",
                          "Transformer/posembed_input/pos_embedding"));
  EXPECT_EQ(names.back(), "head/bias");
  const auto& e = m.layout().entries();
  EXPECT_EQ(e[2].shape, (std::vector<int64_t>{1, 1, 16}));
  EXPECT_EQ(e[3].shape, (std::vector<int64_t>{1, 17, 16}));
  EXPECT_EQ(DimsString(m.layers()[0].out), "[4, 4, 16]");
  EXPECT_EQ(DimsString(m.layers()[1].out), "[16, 16]");  // 16 patches of 16 features
  EXPECT_EQ(DimsString(m.layers()[2].out), "[17, 16]");  // the class token first
  EXPECT_EQ(DimsString(m.layers()[m.layers().size() - 2].out), "[16]");
  EXPECT_EQ(m.positions(), 1);  // one prediction per image
  EXPECT_EQ(m.vocabulary(), 0);
}

TEST(VitModel, ClassTokenIsZeroAndPositionsAreNormalTimesStddev) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml(R"(
model:
  input_shape: [20, 20, 3]
  layers:
    - conv: {features: 64, kernel_size: [2, 2], strides: [2, 2], padding: VALID}
    - to_sequence
    - class_token: {name: token}
    - add_position_embs: {}
    - add_position_embs: {stddev: 0.5}
    - sequence_pool: {method: mean}
    - dense: {features: 3}
)"));
  EXPECT_THAT(
      ParamNames(m),
      ElementsAre("Conv_0/kernel", "Conv_0/bias", "token", "AddPositionEmbs_0/pos_embedding",
                  "AddPositionEmbs_1/pos_embedding", "Dense_0/kernel", "Dense_0/bias"));
  const std::vector<float> p = m.Init({0, 42}, rng::Impl::kPartitionable);
  const auto& e = m.layout().entries();
  auto rms = [&](int index) {
    double sq = 0;
    for (size_t i = 0; i < e[index].size; ++i)
      sq += double{p[e[index].offset + i]} * p[e[index].offset + i];
    return std::sqrt(sq / e[index].size);
  };
  EXPECT_EQ(rms(2), 0.0);            // zeros
  EXPECT_NEAR(rms(3), 0.02, 0.001);  // ViT's normal(stddev=0.02), 101 x 64 values
  EXPECT_NEAR(rms(4), 0.5, 0.025);
  EXPECT_TRUE(m.layers()[5].pool_mean);
}

TEST(VitModel, ErrorsNameTheFieldAndShapes) {
  EXPECT_THAT(FromYaml("model: {input_shape: [4, 4, 1], layers: [flatten, to_sequence]}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[1].to_sequence: the input [16] is not an image")));
  EXPECT_THAT(FromYaml("model: {input_shape: [4, 4, 1], layers: [class_token]}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[0].class_token: the input [4, 4, 1] is not a "
                                 "sequence [T, F] (start with an embed layer, or make an "
                                 "image's pixels tokens with to_sequence)")));
  EXPECT_THAT(
      FromYaml("model: {input_shape: [4, 4, 1], layers: [to_sequence, sequence_pool]}").status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("model.layers[1].sequence_pool.method: missing (expected first")));
  EXPECT_THAT(
      FromYaml("model: {input_shape: [4, 4, 1], layers: [to_sequence, {sequence_pool: {method: "
               "max}}]}")
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown method \"max\"")));
  EXPECT_THAT(FromYaml("model: {input_shape: [4, 4, 1], layers: [to_sequence, {add_position_embs: "
                       "{stddev: 0}}]}")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[1].add_position_embs.stddev: 0 is not in")));
  EXPECT_THAT(
      FromYaml("model: {input_shape: [4, 4, 1], layers: [to_sequence, class_token, class_token]}")
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("model.layers[2].class_token.name: the module name \"cls\" is taken")));
}

}  // namespace
}  // namespace lockstep
