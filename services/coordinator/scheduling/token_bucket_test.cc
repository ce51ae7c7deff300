#include "services/coordinator/scheduling/token_bucket.h"

#include <gtest/gtest.h>

namespace lockstep {
namespace {

TEST(TokenBucket, AMinutesWorthAtOnceThenOneEveryMinuteOverTheRate) {
  const absl::Time t0 = absl::UnixEpoch();
  TokenBucket bucket(3, t0);
  EXPECT_TRUE(bucket.TryTake(t0));
  EXPECT_TRUE(bucket.TryTake(t0));
  EXPECT_TRUE(bucket.TryTake(t0));
  absl::Duration wait;
  EXPECT_FALSE(bucket.TryTake(t0, &wait));
  EXPECT_EQ(wait, absl::Seconds(20));  // 3 a minute: one every 20 s
  EXPECT_FALSE(bucket.TryTake(t0 + absl::Seconds(19), &wait));
  EXPECT_EQ(wait, absl::Seconds(1));
  EXPECT_TRUE(bucket.TryTake(t0 + absl::Seconds(20)));
  EXPECT_FALSE(bucket.TryTake(t0 + absl::Seconds(20)));
}

TEST(TokenBucket, RefillsNoMoreThanAMinutesWorthAndNothingWhenTheClockGoesBack) {
  const absl::Time t0 = absl::UnixEpoch() + absl::Hours(1);
  TokenBucket bucket(2, t0);
  EXPECT_TRUE(bucket.TryTake(t0));
  EXPECT_TRUE(bucket.TryTake(t0));
  EXPECT_FALSE(bucket.TryTake(t0 - absl::Minutes(5)));  // set back: no refill
  const absl::Time later = t0 + absl::Hours(1);         // an idle hour: still 2, not 120
  EXPECT_TRUE(bucket.TryTake(later));
  EXPECT_TRUE(bucket.TryTake(later));
  EXPECT_FALSE(bucket.TryTake(later));
}

}  // namespace
}  // namespace lockstep
