#include "core/rng/flax_rng.h"

#include "core/testing.h"

namespace lockstep::rng {
namespace {

TEST(FlaxRng, ScopeHashesMatchFlax) {
  EXPECT_EQ(FlaxScopeHash("Dense_0", 1), 2998342421u);
  EXPECT_EQ(FlaxScopeHash("Conv_0", 1), 1559354485u);
  EXPECT_EQ(FlaxScopeHash("", 1), 3213575472u);
}

TEST(FlaxRng, MakeRngIsFoldInOfTheHash) {
  const Key root = PRNGKey(3);
  EXPECT_EQ(FlaxMakeRng(root, "Dropout_0", 1), FoldIn(root, FlaxScopeHash("Dropout_0", 1)));
  EXPECT_NE(FlaxMakeRng(root, "Dropout_0", 1), FlaxMakeRng(root, "Dropout_1", 1));
  EXPECT_NE(FlaxMakeRng(root, "Dense_0", 1), FlaxMakeRng(root, "Dense_0", 2));
}

TEST(FlaxRng, CounterUsesMinimalBigEndianBytes) {
  // 256 is two bytes (0x01 0x00); a different hash from 1 and from 0 (no bytes).
  EXPECT_NE(FlaxScopeHash("Dense_0", 256), FlaxScopeHash("Dense_0", 1));
  EXPECT_NE(FlaxScopeHash("Dense_0", 0), FlaxScopeHash("Dense_0", 1));
}

}  // namespace
}  // namespace lockstep::rng
