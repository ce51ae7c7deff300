#include "services/coordinator/jobs/step_deadline.h"

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(StepDeadlineTest, TheLimitUntilFiveStepsThenTenTimesTheSlowestRecentStepAtLeastThreeSeconds) {
  StepDeadline d(absl::Seconds(60), /*adaptive=*/true);
  for (int i = 0; i < 4; ++i) {
    d.Add(absl::Milliseconds(10));
    EXPECT_EQ(d.Next(), absl::Seconds(60)) << i;  // warm-up steps say nothing yet
  }
  d.Add(absl::Milliseconds(10));
  EXPECT_EQ(d.Next(), absl::Seconds(3));  // 10 x 10 ms is below the floor
  d.Add(absl::Milliseconds(900));
  EXPECT_EQ(d.Next(), absl::Seconds(9));
  for (int i = 0; i < 20; ++i) d.Add(absl::Milliseconds(400));  // the 900 ms step ages out
  EXPECT_EQ(d.Next(), absl::Seconds(4));
  d.Add(absl::Seconds(30));
  EXPECT_EQ(d.Next(), absl::Seconds(60));  // never past the limit
}

TEST(StepDeadlineTest, NotAdaptiveIsAlwaysTheLimit) {
  StepDeadline d(absl::Seconds(60), /*adaptive=*/false);
  for (int i = 0; i < 30; ++i) d.Add(absl::Milliseconds(10));
  EXPECT_EQ(d.Next(), absl::Seconds(60));
}

}  // namespace
}  // namespace lockstep
