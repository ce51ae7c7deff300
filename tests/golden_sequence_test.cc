// Sequence models (embed, position_embed, dense/layer_norm/gelu/dropout on [T, F],
// multi_head_attention, the token-level loss) against Flax building the same spec
// (tools/reference/golden_sequence.py): initial params, the loss and every gradient, and
// 20 training steps with dropout and the same masks, on a token stream windowed as
// Lockstep windows token datasets. The gradient and training checks are
// golden_sequence.cc's, which the CUDA tests run too.
#include "core/data/dataset.h"
#include "core/testing.h"
#include "tests/golden.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

using testing::ReadSequenceGolden;
using testing::SequenceGoldenFile;

class SequenceGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(SequenceGolden, InitMatchesFlaxWithin1e6) {
  ASSERT_OK_AND_ASSIGN(SequenceGoldenFile f, ReadSequenceGolden(GetParam()));
  int init_tensors = 0;
  for (const auto& [name, t] : f.g.st.tensors()) init_tensors += name.rfind("init.", 0) == 0;
  EXPECT_EQ(init_tensors, static_cast<int>(f.g.setup.model.layout().entries().size()));
  testing::ExpectInitWithin1e6(f.g);
}

TEST_P(SequenceGolden, DatasetFitsTheModel) {
  ASSERT_OK_AND_ASSIGN(SequenceGoldenFile f, ReadSequenceGolden(GetParam()));
  EXPECT_OK(CheckDatasetFitsModel(f.data, f.g.setup.model));
  Dataset wider = f.data;
  wider.max_token = f.g.setup.model.vocabulary();
  EXPECT_THAT(CheckDatasetFitsModel(wider, f.g.setup.model),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                ::testing::HasSubstr("has num_embeddings")));
}

TEST_P(SequenceGolden, TokenLossAndEveryGradientWithin1e5) {
  auto backend = NewCpuBackend(DefaultCpuThreads());
  testing::ExpectSequenceGradientsMatchJax(backend.get(), GetParam());
}

TEST_P(SequenceGolden, TwentyStepsWithDropoutMatchOptax) {
  auto backend = NewCpuBackend(DefaultCpuThreads());
  testing::ExpectSequenceTrainingMatchesOptax(backend.get(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, SequenceGolden,
                         ::testing::Values("embed", "attention", "decoder"));

}  // namespace
}  // namespace lockstep
