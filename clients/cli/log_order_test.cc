// Tests of SelectEvents (time order across the two streams, --since, --tail) and Keep
// (--no-steps, --level).
#include "clients/cli/log_order.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace lockstep::cli {
namespace {

using ::testing::ElementsAre;

v1::JobEvent Line(int64_t ms, const std::string& text) {
  v1::JobEvent e;
  e.set_unix_ms(ms);
  e.mutable_log()->set_message(text);
  return e;
}
v1::JobEvent Step(int64_t ms, int64_t step) {
  v1::JobEvent e;
  e.set_unix_ms(ms);
  e.mutable_step()->set_step(step);
  return e;
}

std::vector<std::string> Describe(const std::vector<v1::JobEvent>& events) {
  std::vector<std::string> out;
  for (const v1::JobEvent& e : events) {
    out.push_back(e.has_log() ? e.log().message() : "step " + std::to_string(e.step().step()));
  }
  return out;
}

// At 400deec the events came first, then the log lines (each stream as it came), and there
// was neither --since nor --tail.
TEST(SelectEvents, MergesTheStreamsInTimeThenKeepsThoseSinceAndTheLastN) {
  // The events' stream, then the log lines' stream, as `logs` reads them.
  const std::vector<v1::JobEvent> read = {Step(10, 1),       Step(30, 2),         Step(50, 3),
                                          Line(5, "queued"), Line(30, "started"), Line(60, "done")};
  EXPECT_THAT(Describe(SelectEvents(read, std::nullopt, std::nullopt)),
              ElementsAre("queued", "step 1", "step 2", "started", "step 3", "done"));
  EXPECT_THAT(Describe(SelectEvents(read, 30, std::nullopt)),
              ElementsAre("step 2", "started", "step 3", "done"));
  EXPECT_THAT(Describe(SelectEvents(read, std::nullopt, 2)), ElementsAre("step 3", "done"));
  EXPECT_THAT(Describe(SelectEvents(read, 30, 3)), ElementsAre("started", "step 3", "done"));
  EXPECT_THAT(Describe(SelectEvents(read, std::nullopt, 0)), ElementsAre());
  EXPECT_THAT(Describe(SelectEvents(read, 100, std::nullopt)), ElementsAre());
  // At equal times the event comes first, however the streams' messages interleaved.
  EXPECT_THAT(
      Describe(SelectEvents({Line(30, "started"), Step(30, 2)}, std::nullopt, std::nullopt)),
      ElementsAre("step 2", "started"));
}

// At 0692893 a CNN job's `logs` was 1,783 lines, 13 of them not steps, with no filter.
TEST(Keep, NoStepsDropsTheStepsAndLevelTheLessSevereLines) {
  v1::JobEvent info = Line(1, "started"), warning = Line(2, "slow"), error = Line(3, "lost");
  info.mutable_log()->set_level("info");
  warning.mutable_log()->set_level("warning");
  error.mutable_log()->set_level("error");
  v1::JobEvent state;
  state.mutable_state()->set_state(v1::RUNNING);
  const LogFilter all;
  for (const v1::JobEvent& e : {Step(1, 1), info, warning, error, state}) EXPECT_TRUE(Keep(e, all));
  const LogFilter no_steps = {.steps = false};
  EXPECT_FALSE(Keep(Step(1, 1), no_steps));
  EXPECT_TRUE(Keep(info, no_steps));
  EXPECT_TRUE(Keep(state, no_steps));
  const LogFilter warnings = {.steps = true, .min_severity = Severity("warning")};
  EXPECT_FALSE(Keep(info, warnings));
  EXPECT_TRUE(Keep(warning, warnings));
  EXPECT_TRUE(Keep(error, warnings));
  EXPECT_TRUE(Keep(state, warnings));
  EXPECT_EQ(Severity("warn"), Severity("warning"));
  EXPECT_EQ(Severity("loud"), -1);
}

}  // namespace
}  // namespace lockstep::cli
