#include "core/data/augment_draws.h"

#include "core/rng/random.h"
#include "core/testing.h"

namespace lockstep {
namespace {

constexpr rng::Impl kPart = rng::Impl::kPartitionable;

// jax.random.randint(key, (), minval, maxval) under JAX 0.10.2's defaults (partitionable).
TEST(AugmentDraws, RandIntIsJaxs) {
  const rng::Key k = rng::PRNGKey(42), k3 = rng::FoldIn(k, 3);
  const struct {
    int32_t span, at_zero, at_five;
  } want[] = {{1, 0, 5},
              {2, 0, 5},
              {7, 1, 8},
              {100, 44, 31},
              {65537, 31357, 30534},
              {1 << 30, 977810628, 88489099}};
  for (const auto& w : want) {
    EXPECT_EQ(rng::RandInt(k, kPart, 0, w.span), w.at_zero) << w.span;
    EXPECT_EQ(rng::RandInt(k3, kPart, 5, 5 + w.span), w.at_five) << w.span;
  }
  EXPECT_EQ(rng::RandInt(k, kPart, 3, 3), 3);  // an empty range gives minval, as JAX's
}

// jax.random.bernoulli(fold_in(PRNGKey(42), 1), 0.5): uniform 0.72766423 -> False.
TEST(AugmentDraws, FlipIsJaxsBernoulli) {
  const rng::Key k = rng::FoldIn(rng::PRNGKey(42), 1);
  EXPECT_FALSE(FlipDraw(k, 0.5));
  EXPECT_TRUE(FlipDraw(k, 0.73));
  EXPECT_FALSE(FlipDraw(k, 0.0));
  EXPECT_TRUE(FlipDraw(k, 1.0));
}

TEST(AugmentDraws, CropsFitTheirImages) {
  const ResizedCropRanges ranges{0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0};
  for (uint32_t i = 0; i < 2000; ++i) {
    const rng::Key key = rng::FoldIn(rng::PRNGKey(7), i);
    const int h = 20 + i % 300, w = 17 + (i * 7) % 500;
    const CropBox b = RandomResizedCropBox(key, h, w, ranges);
    ASSERT_GE(b.top, 0);
    ASSERT_GE(b.left, 0);
    ASSERT_GT(b.height, 0);
    ASSERT_GT(b.width, 0);
    ASSERT_LE(b.top + b.height, h) << i;
    ASSERT_LE(b.left + b.width, w) << i;
    const CropBox c = RandomCropBox(key, h, w, 16, 9);
    ASSERT_LE(c.top + 16, h);
    ASSERT_LE(c.left + 9, w);
    EXPECT_EQ(RandomResizedCropBox(key, h, w, ranges), b);  // a function of the key alone
  }
}

// When no try fits (a scale range above what the ratio allows), torchvision's central
// fallback: the whole image clipped to the ratio range, centered.
TEST(AugmentDraws, ResizedCropFallsBackToTheCenter) {
  const ResizedCropRanges wide{1.0, 1.0, 2.0, 3.0};
  // 100x100 at area 1 and ratio >= 2 never fits; in_ratio 1 < 2: w = 100, h = round(50).
  EXPECT_EQ(RandomResizedCropBox(rng::PRNGKey(0), 100, 100, wide), (CropBox{25, 0, 50, 100}));
  const ResizedCropRanges tall{1.0, 1.0, 0.25, 0.5};
  EXPECT_EQ(RandomResizedCropBox(rng::PRNGKey(0), 10, 40, tall), (CropBox{0, 17, 10, 5}));
}

}  // namespace
}  // namespace lockstep
