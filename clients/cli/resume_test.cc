#include "clients/cli/resume.h"

#include <gtest/gtest.h>

namespace lockstep::cli {
namespace {

v1::JobEvent Step(int64_t step) {
  v1::JobEvent e;
  e.mutable_step()->set_step(step);
  return e;
}
v1::JobEvent Eval(int64_t step) {
  v1::JobEvent e;
  e.mutable_eval()->set_step(step);
  return e;
}
v1::JobEvent State(v1::JobState state, int64_t unix_ms) {
  v1::JobEvent e;
  e.mutable_state()->set_state(state);
  e.set_unix_ms(unix_ms);
  return e;
}

TEST(EventResume, AResumedStreamRepeatsNothingAndResumesAtTheLastStep) {
  EventResume r;
  EXPECT_EQ(r.from_step(), 0);
  EXPECT_TRUE(r.First(State(v1::QUEUED, 1)));
  EXPECT_TRUE(r.First(State(v1::RUNNING, 2)));
  EXPECT_TRUE(r.First(Step(1)));
  EXPECT_TRUE(r.First(Step(2)));
  EXPECT_EQ(r.from_step(), 2);
  // The stream broke before step 2's evaluation; the new one replays the states and step 2.
  EXPECT_FALSE(r.First(State(v1::QUEUED, 1)));
  EXPECT_FALSE(r.First(State(v1::RUNNING, 2)));
  EXPECT_FALSE(r.First(Step(2)));
  EXPECT_TRUE(r.First(Eval(2)));
  EXPECT_TRUE(r.First(State(v1::RECOVERING, 3)));
  EXPECT_TRUE(r.First(State(v1::RUNNING, 4)));  // the same state again, later: new
  // Recovered from the snapshot of step 1: step 2 and its evaluation come again.
  EXPECT_FALSE(r.First(Step(2)));
  EXPECT_FALSE(r.First(Eval(2)));
  EXPECT_TRUE(r.First(Step(3)));
  EXPECT_EQ(r.from_step(), 3);
}

TEST(EventResume, ReplayedStepsAreShownOnceEachAndDoNotMoveTheResumePoint) {
  EventResume r;
  EXPECT_TRUE(r.First(Step(1)));
  EXPECT_TRUE(r.First(Step(2)));
  v1::JobEvent replay = Step(2);
  replay.mutable_step()->set_replay(true);
  replay.set_unix_ms(5);
  EXPECT_TRUE(r.First(replay));   // dropped as "seen" at 400deec
  EXPECT_FALSE(r.First(replay));  // a resumed stream brings it again
  v1::JobEvent again = replay;
  again.set_unix_ms(9);  // a second recovery replays step 2 once more
  EXPECT_TRUE(r.First(again));
  EXPECT_EQ(r.from_step(), 2);
  EXPECT_TRUE(r.First(Step(3)));
}

}  // namespace
}  // namespace lockstep::cli
