#include "core/grad_buckets.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace lockstep {
namespace {

// The range of layer `i`'s parameters in the flat buffer.
std::pair<size_t, size_t> LayerRange(const Model& m, int i) {
  const Layer& l = m.layers()[i];
  size_t begin = SIZE_MAX, end = 0;
  for (int index : {l.kernel, l.bias, l.scale}) {
    if (index < 0) continue;
    const ParamEntry& e = m.layout().entries()[index];
    begin = std::min(begin, e.offset);
    end = std::max(end, e.offset + e.size);
  }
  return {begin, end};
}

// Buckets tile [0, total) from the top down, each ending at a layer boundary.
void ExpectTiles(const Model& m, const std::vector<GradBucket>& buckets) {
  size_t end = m.layout().total();
  for (const GradBucket& b : buckets) {
    EXPECT_EQ(b.offset + b.size, end);
    EXPECT_GT(b.size, 0u);
    end = b.offset;
  }
  EXPECT_EQ(end, 0u);
}

std::vector<int> ParamLayers(const Model& m) {
  std::vector<int> out;
  for (int i = static_cast<int>(m.layers().size()) - 1; i >= 0; --i) {
    if (m.layers()[i].has_params()) out.push_back(i);
  }
  return out;
}

TEST(GradBuckets, ZeroIsOneBucketAfterBackward) {
  const Model m = Model::Cnn();
  const auto b = PlanGradBuckets(m, 0);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].offset, 0u);
  EXPECT_EQ(b[0].size, m.layout().total());
  EXPECT_EQ(b[0].layer, -1);
}

TEST(GradBuckets, OneBytePerLayerLastFirst) {
  const Model m = Model::Cnn();
  const auto b = PlanGradBuckets(m, 1);
  const std::vector<int> layers = ParamLayers(m);  // Dense_1, Dense_0, Conv_1, Conv_0
  ASSERT_EQ(layers.size(), 4u);
  ASSERT_EQ(b.size(), layers.size());
  ExpectTiles(m, b);
  for (size_t k = 0; k < b.size(); ++k) {
    const auto [begin, end] = LayerRange(m, layers[k]);
    EXPECT_EQ(b[k].layer, layers[k]);
    EXPECT_EQ(b[k].offset, begin);
    EXPECT_EQ(b[k].offset + b[k].size, end);
  }
}

TEST(GradBuckets, SmallLayersGatherUntilTheSize) {
  const Model m = Model::Cnn();
  // 1 MiB: Dense_1 (2,570 floats) waits for Dense_0 (802,816 + 256); the convs' 18,816
  // floats fill no MiB and go after backward.
  const auto b = PlanGradBuckets(m, 1 << 20);
  const std::vector<int> layers = ParamLayers(m);
  ASSERT_EQ(b.size(), 2u);
  ExpectTiles(m, b);
  EXPECT_EQ(b[0].layer, layers[1]);
  EXPECT_EQ(b[0].offset, LayerRange(m, layers[1]).first);
  EXPECT_EQ(b[1].layer, -1);
  // Larger than the whole buffer: one bucket, after backward.
  const auto one = PlanGradBuckets(m, 64 << 20);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].layer, -1);
  EXPECT_EQ(one[0].size, m.layout().total());
}

TEST(GradBuckets, LayerNormAndParamlessLayers) {
  Model m({4, 4, 3});
  m.Flatten();
  m.Dense(8);
  m.Relu();
  m.LayerNorm();
  m.Dense(5, /*use_bias=*/false);
  const auto b = PlanGradBuckets(m, 1);
  ASSERT_EQ(b.size(), 3u);
  ExpectTiles(m, b);
  EXPECT_EQ(b[0].layer, 4);
  EXPECT_EQ(b[1].layer, 3);
  EXPECT_EQ(b[2].layer, 1);
}

TEST(GradBuckets, NoParamsNoBuckets) {
  Model m({4, 4, 1});
  m.Flatten();
  EXPECT_TRUE(PlanGradBuckets(m, 1).empty());
  EXPECT_TRUE(PlanGradBuckets(m, 0).empty());
}

TEST(GradBuckets, AlignedToBlocksTheyStillTileAndCompleteNoSooner) {
  // The MLP's tensors: 784x512 + 512, 512x512 + 512, 512x10 + 10 floats.
  const Model m = Model::Mlp({512, 512}, 0.0);
  for (size_t bytes : {size_t{1}, size_t{4096}, size_t{65536}}) {
    const std::vector<GradBucket> plain = PlanGradBuckets(m, bytes);
    const std::vector<GradBucket> aligned = AlignGradBuckets(plain, 1024);
    ExpectTiles(m, aligned);
    for (size_t k = 0; k < aligned.size(); ++k) {
      const GradBucket& b = aligned[k];
      if (k + 1 < aligned.size()) EXPECT_EQ(b.offset % 1024, 0u) << b.offset;
      // Its floats were complete when its layer was: they lie in buckets of that layer or
      // a later one.
      for (const GradBucket& p : plain) {
        if (p.offset < b.offset + b.size && b.offset < p.offset + p.size) {
          EXPECT_GE(p.layer, b.layer);
        }
      }
    }
  }
  // 10 + 10 floats of the last dense layer's: too few to fill a block; they wait.
  const std::vector<GradBucket> one = {{1000, 20, 5}, {0, 1000, -1}};
  const std::vector<GradBucket> aligned = AlignGradBuckets(one, 1024);
  ASSERT_EQ(aligned.size(), 1u);
  EXPECT_EQ(aligned[0].offset, 0u);
  EXPECT_EQ(aligned[0].size, 1020u);
  EXPECT_EQ(aligned[0].layer, -1);
  EXPECT_TRUE(AlignGradBuckets({}, 1024).empty());
}

}  // namespace
}  // namespace lockstep
