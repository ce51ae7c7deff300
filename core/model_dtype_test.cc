// ModelFromSpec's dtype policy (docs/models.md#mixed-precision): model.dtype as every
// module's Flax `dtype=`, a module's or block's own overriding it, functions taking their
// input's dtype and sums the promotion of theirs, float32 params only, and the errors.
#include "core/model.h"
#include "core/model_spec.h"
#include "core/model_testing.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using testing::FromYaml;
using ::testing::HasSubstr;
using testing::StatusIs;

std::vector<DType> Dtypes(const Model& m) {
  std::vector<DType> out;
  for (const Layer& l : m.layers()) out.push_back(l.dtype);
  return out;
}

constexpr DType kF32 = DType::kFloat32, kBf16 = DType::kBfloat16;

TEST(ModelDtype, Float32IsTheDefault) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml("model: {kind: cnn}"));
  EXPECT_FALSE(m.HasBf16());
  ASSERT_OK_AND_ASSIGN(Model explicit32, FromYaml("model: {kind: cnn, dtype: float32}"));
  EXPECT_EQ(Dtypes(explicit32), Dtypes(m));
}

TEST(ModelDtype, ModelDtypeIsEveryModulesAndFunctionsFollowTheirInput) {
  ASSERT_OK_AND_ASSIGN(Model m,
                       FromYaml("model: {kind: cnn, dtype: bfloat16, param_dtype: float32}"));
  // conv relu pool conv relu pool flatten dense relu dense: all bfloat16.
  EXPECT_EQ(Dtypes(m), std::vector<DType>(10, kBf16));
}

TEST(ModelDtype, ModulesAndBlocksOverrideIt) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml(R"(
model:
  input_shape: [4, 4, 2]
  dtype: bfloat16
  blocks:
    Head:
      layers:
        - dense: {features: 8}
        - relu
        - dense: {features: 10, dtype: bfloat16}
  layers:
    - conv: {features: 3, kernel_size: [3, 3], dtype: float32}
    - relu
    - layer_norm: {}
    - flatten
    - block: {module: Head, dtype: float32}
)"));
  // The float32 conv's relu is float32; the norm is the model's; the block's first dense
  // and its relu float32, its last dense its own bfloat16.
  EXPECT_EQ(Dtypes(m), (std::vector<DType>{kF32, kF32, kBf16, kBf16, kF32, kF32, kBf16}));
}

TEST(ModelDtype, SumsPromoteAndCountExcludingPoolsAreFloat32) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml(R"(
model:
  input_shape: [4, 4, 2]
  dtype: bfloat16
  layers:
    - conv: {features: 2, kernel_size: [1, 1], dtype: float32}
    - residual: {layers: [{conv: {features: 2, kernel_size: [3, 3]}}]}
    - avg_pool: {window_shape: [2, 2], padding: SAME, count_include_pad: false}
    - conv: {features: 2, kernel_size: [1, 1]}
    - avg_pool: {window_shape: [2, 2]}
    - flatten
    - dense: {features: 10}
)"));
  // float32 conv; bfloat16 conv + float32 input: a float32 sum; avg_pool without
  // count_include_pad divides by float32 counts; the bfloat16 conv's pool stays bfloat16.
  EXPECT_EQ(Dtypes(m), (std::vector<DType>{kF32, kBf16, kF32, kF32, kBf16, kBf16, kBf16, kBf16}));
}

TEST(ModelDtype, ViTsClassTokenAndPositionEmbeddingPromoteToFloat32) {
  ASSERT_OK_AND_ASSIGN(Model m, FromYaml(R"(
model:
  input_shape: [8, 8, 1]
  dtype: bfloat16
  layers:
    - conv: {features: 4, kernel_size: [4, 4], strides: [4, 4], padding: VALID}
    - to_sequence
    - class_token
    - add_position_embs
    - layer_norm
    - sequence_pool: {method: mean}
    - dense: {features: 10}
)"));
  // concatenate([cls], x) and x + pos_embedding with their float32 params: float32; the
  // norm computes in bfloat16 again, and the pool keeps its input's.
  EXPECT_EQ(Dtypes(m), (std::vector<DType>{kBf16, kBf16, kF32, kF32, kBf16, kBf16, kBf16}));
}

TEST(ModelDtype, BadDtypesNameTheirField) {
  EXPECT_THAT(FromYaml("model: {kind: cnn, dtype: float16}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.dtype: unknown dtype \"float16\" (expected float32 or "
                                 "bfloat16)")));
  EXPECT_THAT(FromYaml("model: {kind: mlp, hidden: [8], param_dtype: bfloat16}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.param_dtype: \"bfloat16\" is not supported")));
  EXPECT_THAT(FromYaml(R"(
model:
  input_shape: [4]
  layers: [flatten, {dense: {features: 10, dtype: bf16}}]
)"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.layers[1].dense.dtype: unknown dtype \"bf16\"")));
}

}  // namespace
}  // namespace lockstep
