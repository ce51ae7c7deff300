#include "core/plan.h"

#include <algorithm>
#include <set>

#include "core/rng/random.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

TEST(ShardBatch, SplitsRowMajor) {
  std::vector<int32_t> g = {10, 11, 12, 13, 14, 15};
  ASSERT_OK_AND_ASSIGN(auto shards, ShardBatch(g, 3));
  ASSERT_EQ(shards.size(), 3u);
  EXPECT_EQ(std::vector<int32_t>(shards[1].begin(), shards[1].end()),
            (std::vector<int32_t>{12, 13}));
}

TEST(ShardBatch, IndivisibleNamesBothNumbers) {
  std::vector<int32_t> g(100);
  EXPECT_THAT(ShardBatch(g, 3), StatusIs(absl::StatusCode::kInvalidArgument,
                                         ::testing::AllOf(HasSubstr("100"), HasSubstr("3"))));
}

TEST(RangeOf, BalancedContiguousRangesCoverEveryReplicaInRankOrder) {
  for (int v : {1, 4, 7}) {
    for (int n = 1; n <= v; ++n) {
      int next = 0, smallest = v, largest = 0;
      for (int r = 0; r < n; ++r) {
        const ReplicaRange got = RangeOf(r, n, v);
        EXPECT_EQ(got.first, next) << v << " " << n << " " << r;
        EXPECT_GE(got.count, 1);
        next += got.count;
        smallest = std::min(smallest, got.count);
        largest = std::max(largest, got.count);
      }
      EXPECT_EQ(next, v);
      EXPECT_LE(largest - smallest, 1);
    }
  }
  EXPECT_EQ(RangeOf(1, 3, 4).first, 1);
  EXPECT_EQ(RangeOf(2, 3, 4).count, 2);
}

TEST(TrainingPlan, FollowsTheFlaxExampleAndSeedProgram) {
  const auto impl = rng::Impl::kPartitionable;
  TrainingPlan plan(0, 42, impl, 10, 4, 2);
  auto k = rng::Split(rng::PRNGKey(0), 2, impl);
  EXPECT_EQ(plan.init_key(), k[1]);
  EXPECT_EQ(plan.steps_per_epoch(), 2);
  auto perm = rng::Permutation(rng::Split(k[0], 2, impl)[1], impl, 10);
  auto main = rng::PRNGKey(42);
  for (int s = 0; s < 2; ++s) {
    StepPlan p = plan.Next();
    EXPECT_EQ(p.step, s);
    EXPECT_EQ(p.indices, std::vector<int32_t>(perm.begin() + 4 * s, perm.begin() + 4 * s + 4));
    auto sk = rng::Split(main, 2, impl);
    main = sk[1];
    EXPECT_EQ(p.keys, rng::Split(sk[0], 2, impl));
  }
  StepPlan p = plan.Next();  // a new epoch: a new order
  EXPECT_EQ(p.epoch, 1);
  std::set<int32_t> seen(p.indices.begin(), p.indices.end());
  EXPECT_EQ(seen.size(), 4u);
}

TEST(TrainingPlan, TheEpochsDataKeyIsJaxsFoldInOfItsInputKey) {
  // JAX (jax_threefry_partitionable):
  //   rng = PRNGKey(0); rng, _ = split(rng)
  //   per epoch: rng, input_rng = split(rng); data_key = fold_in(input_rng, 1)
  //   example 7's key: fold_in(data_key, 7)
  TrainingPlan plan(0, 0, rng::Impl::kPartitionable, 10, 4, 1);
  const rng::Key epoch0{3254170493u, 2583240948u}, epoch1{1778218930u, 2921127401u};
  EXPECT_EQ(plan.Next().data_key, epoch0);
  EXPECT_EQ(plan.Next().data_key, epoch0);
  EXPECT_EQ(plan.Next().data_key, epoch1);
  EXPECT_EQ(rng::FoldIn(epoch0, 7), (rng::Key{1702364547u, 3818164753u}));
  EXPECT_EQ(rng::FoldIn(epoch1, 7), (rng::Key{2201997187u, 109624123u}));
}

}  // namespace
}  // namespace lockstep
