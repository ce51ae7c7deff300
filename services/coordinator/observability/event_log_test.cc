// Tests of EventLog: cursors, replay filtering, the byte budget, Close, Compact and the
// wake-ups of subscribers.
#include "services/coordinator/observability/event_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::Gt;

v1::JobEvent State(v1::JobState s) {
  v1::JobEvent e;
  e.mutable_state()->set_state(s);
  return e;
}

v1::JobEvent Step(int64_t step) {
  v1::JobEvent e;
  e.mutable_step()->set_step(step);
  e.mutable_step()->set_loss(1.5f);
  return e;
}

v1::JobEvent Eval(int64_t step) {
  v1::JobEvent e;
  e.mutable_eval()->set_step(step);
  e.mutable_eval()->set_test_loss(0.25);
  return e;
}

// What one step event (of a step below 128) costs a log's budget.
size_t StepCost() {
  EventLog probe(1 << 20);
  probe.Append(Step(10));
  return probe.bytes();
}

// Each event as "state:N", "step:N" or "eval:N", to compare batches at a glance.
std::vector<std::string> Describe(const std::vector<v1::JobEvent>& events) {
  std::vector<std::string> out;
  for (const v1::JobEvent& e : events) {
    if (e.has_state()) out.push_back("state:" + v1::JobState_Name(e.state().state()));
    if (e.has_step()) out.push_back("step:" + std::to_string(e.step().step()));
    if (e.has_eval()) out.push_back("eval:" + std::to_string(e.eval().step()));
  }
  return out;
}

TEST(EventLog, ReadsFromACursorAtMostMaxEventsAndReturnsTheNextCursor) {
  EventLog log(1 << 20);
  EXPECT_EQ(log.end(), 0);
  log.Append(State(v1::RUNNING));
  log.Append(Step(1));
  log.Append(Step(2));
  log.Append(Eval(2));
  log.Append(Step(3));
  EXPECT_EQ(log.end(), 5);
  EXPECT_THAT(log.bytes(), Gt(0u));

  EventLog::Batch first = log.Read(0, 0, 0, 2);
  EXPECT_THAT(Describe(first.events), ElementsAre("state:RUNNING", "step:1"));
  EXPECT_EQ(first.next, 2);
  EXPECT_FALSE(first.closed);

  EventLog::Batch rest = log.Read(first.next, 0, 0, 100);
  EXPECT_THAT(Describe(rest.events), ElementsAre("step:2", "eval:2", "step:3"));
  EXPECT_EQ(rest.next, 5);
  EXPECT_FALSE(rest.closed);

  EventLog::Batch none = log.Read(rest.next, 0, 0, 100);
  EXPECT_TRUE(none.events.empty());
  EXPECT_EQ(none.next, 5);
}

TEST(EventLog, ReplayKeepsStateEventsAndStepsFromFromStepOnlyBeforeReplayUntil) {
  EventLog log(1 << 20);
  log.Append(State(v1::RUNNING));  // 0
  log.Append(Step(1));             // 1
  log.Append(Step(2));             // 2
  log.Append(Eval(2));             // 3
  log.Append(Step(3));             // 4
  log.Append(Eval(3));             // 5
  const int64_t replay_until = log.end();
  // After the watcher started: not filtered, whatever their step.
  log.Append(Step(1));
  log.Append(Eval(1));
  log.Append(State(v1::SUCCEEDED));

  EventLog::Batch b = log.Read(0, /*from_step=*/3, replay_until, 100);
  EXPECT_THAT(Describe(b.events), ElementsAre("state:RUNNING", "step:3", "eval:3", "step:1",
                                              "eval:1", "state:SUCCEEDED"));
  EXPECT_EQ(b.next, 9);

  // `max` counts the events returned, not the ones filtered out.
  EventLog::Batch two = log.Read(0, 3, replay_until, 2);
  EXPECT_THAT(Describe(two.events), ElementsAre("state:RUNNING", "step:3"));
  EventLog::Batch after = log.Read(two.next, 3, replay_until, 100);
  EXPECT_THAT(Describe(after.events), ElementsAre("eval:3", "step:1", "eval:1", "state:SUCCEEDED"));
}

TEST(EventLog, OverBudgetTheOldestStepEventsGoFirstAndStateAndEvalEventsStay) {
  // Room for the state and eval events and a handful of steps, never all twenty.
  EventLog log(12 * StepCost());
  log.Append(State(v1::RUNNING));
  log.Append(Eval(0));
  for (int s = 10; s < 30; ++s) log.Append(Step(s));
  log.Append(Eval(29));
  EXPECT_EQ(log.end(), 23);

  EventLog::Batch b = log.Read(0, 0, 0, 100);
  std::vector<std::string> got = Describe(b.events);
  ASSERT_GE(got.size(), 4u);
  EXPECT_EQ(got[0], "state:RUNNING");
  EXPECT_EQ(got[1], "eval:0");
  EXPECT_EQ(got.back(), "eval:29");
  // The steps kept are the newest ones, without a gap.
  const size_t kept = got.size() - 3;
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, 20u);
  for (size_t i = 0; i < kept; ++i) {
    EXPECT_EQ(got[2 + i], "step:" + std::to_string(30 - kept + i));
  }
  EXPECT_EQ(b.next, 23);
}

TEST(EventLog, AReaderBehindSkipsTheDroppedEventsAndItsCursorContinues) {
  EventLog log(4 * StepCost());
  log.Append(State(v1::RUNNING));  // 0
  log.Append(Step(10));            // 1
  // The reader has seen the state event and the first step.
  const int64_t cursor = 2;
  for (int s = 11; s < 30; ++s) log.Append(Step(s));  // 2..20
  EventLog::Batch b = log.Read(cursor, 0, 0, 100);
  ASSERT_FALSE(b.events.empty());
  EXPECT_GT(b.events.front().step().step(), 11);  // step 11 (seq 2) was dropped
  EXPECT_EQ(b.events.back().step().step(), 29);
  EXPECT_EQ(b.next, log.end());
  // It reads on from there: the next event appended comes next.
  log.Append(Step(30));
  EXPECT_THAT(Describe(log.Read(b.next, 0, 0, 100).events), ElementsAre("step:30"));
}

TEST(EventLog, CloseReportsClosedOnlyOnceTheReaderReachesTheEnd) {
  EventLog log(1 << 20);
  log.Append(State(v1::RUNNING));
  log.Append(Step(1));
  log.Append(State(v1::SUCCEEDED));
  log.Close();
  log.Append(Step(2));  // ignored: closed
  EXPECT_EQ(log.end(), 3);

  EventLog::Batch first = log.Read(0, 0, 0, 2);
  EXPECT_EQ(first.events.size(), 2u);
  EXPECT_FALSE(first.closed);
  EventLog::Batch last = log.Read(first.next, 0, 0, 2);
  EXPECT_THAT(Describe(last.events), ElementsAre("state:SUCCEEDED"));
  EXPECT_TRUE(last.closed);
  EXPECT_EQ(last.next, 3);
  EXPECT_TRUE(log.Read(last.next, 0, 0, 2).closed);
}

TEST(EventLog, AReadOfTheHistoryOnlyStopsAtStopAtAndSaysClosed) {
  EventLog log(1 << 20);
  log.Append(State(v1::RUNNING));
  log.Append(Step(1));
  log.Append(Step(2));
  const int64_t stop_at = log.end();
  log.Append(Step(3));  // after the watcher started: not history
  EventLog::Batch first = log.Read(0, 0, stop_at, 2, stop_at);
  EXPECT_THAT(Describe(first.events), ElementsAre("state:RUNNING", "step:1"));
  EXPECT_FALSE(first.closed);
  EventLog::Batch last = log.Read(first.next, 0, stop_at, 100, stop_at);
  EXPECT_THAT(Describe(last.events), ElementsAre("step:2"));
  EXPECT_TRUE(last.closed);
  EXPECT_EQ(last.next, stop_at);
}

v1::JobEvent Line(const std::string& message) {
  v1::JobEvent e;
  e.mutable_log()->set_message(message);
  return e;
}

TEST(EventLog, OverBudgetTheOldestLogLinesGoAndCompactKeepsThem) {
  EventLog probe(1 << 20);
  probe.Append(Line("line 0"));
  const size_t cost = probe.bytes();
  EventLog log(3 * cost);
  for (int i = 0; i < 5; ++i) log.Append(Line("line " + std::to_string(i)));
  log.Close();
  log.Compact();
  std::vector<std::string> kept;
  for (const v1::JobEvent& e : log.Read(0, 0, 0, 100).events) kept.push_back(e.log().message());
  EXPECT_THAT(kept, ElementsAre("line 2", "line 3", "line 4"));
}

TEST(EventLog, CompactDropsOnlyTheStepEvents) {
  EventLog log(1 << 20);
  log.Append(State(v1::RUNNING));
  log.Append(Step(1));
  log.Append(Eval(1));
  log.Append(Step(2));
  log.Append(State(v1::SUCCEEDED));
  log.Close();
  const size_t before = log.bytes();
  log.Compact();
  EXPECT_LT(log.bytes(), before);
  EXPECT_EQ(log.end(), 5);
  EventLog::Batch b = log.Read(0, 0, 0, 100);
  EXPECT_THAT(Describe(b.events), ElementsAre("state:RUNNING", "eval:1", "state:SUCCEEDED"));
  EXPECT_TRUE(b.closed);
}

// A finished job's kept steps (its StepHistory) take the step events' place, in time
// order: a step at the time of the RUNNING state goes after it, one at the time of an
// evaluation or of the last state before them.
TEST(EventLog, CompactPutsTheKeptStepsInTimeOrderAmongTheOtherEvents) {
  const auto at = [](v1::JobEvent e, int64_t ms) {
    e.set_unix_ms(ms);
    return e;
  };
  EventLog log(1 << 20);
  log.Append(at(State(v1::QUEUED), 10));
  log.Append(at(State(v1::RUNNING), 20));
  for (int64_t s = 1; s <= 4; ++s) log.Append(at(Step(s), 20 + 10 * s));
  log.Append(at(Eval(4), 60));
  log.Append(at(State(v1::SUCCEEDED), 60));
  log.Close();
  log.Compact({at(Step(1), 20), at(Step(2), 40), at(Step(4), 60)});
  EventLog::Batch b = log.Read(0, 0, log.end(), 100);
  EXPECT_THAT(Describe(b.events), ElementsAre("state:QUEUED", "state:RUNNING", "step:1", "step:2",
                                              "step:4", "eval:4", "state:SUCCEEDED"));
  EXPECT_TRUE(b.closed);
  // A watcher from step 2 replays the kept steps from there (and every state).
  EXPECT_THAT(Describe(log.Read(0, 2, log.end(), 100).events),
              ElementsAre("state:QUEUED", "state:RUNNING", "step:2", "step:4", "eval:4",
                          "state:SUCCEEDED"));
}

TEST(EventLog, WakesSubscribersAfterEveryAppendAndCloseUntilTheHandleIsDropped) {
  EventLog log(1 << 20);
  int a = 0, b = 0;
  EventLog::Wake wake_a = log.Subscribe([&] { ++a; });
  EventLog::Wake wake_b = log.Subscribe([&] { ++b; });
  log.Append(Step(1));
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 1);
  wake_b.reset();
  log.Append(Step(2));
  EXPECT_EQ(a, 2);
  EXPECT_EQ(b, 1);
  log.Close();
  EXPECT_EQ(a, 3);
  log.Append(Step(3));  // ignored once closed: nothing to wake for
  log.Close();
  EXPECT_EQ(a, 3);
  EXPECT_EQ(b, 1);
}

TEST(EventLog, AWakeUpRunsWithoutTheLogsLockAndSeesTheNewEvent) {
  EventLog log(1 << 20);
  std::vector<int64_t> seen;
  EventLog::Wake wake = log.Subscribe([&] {
    seen.push_back(log.end());  // would deadlock if the lock were held
    log.Read(0, 0, 0, 100);
  });
  log.Append(Step(1));
  log.Append(Step(2));
  EXPECT_THAT(seen, ElementsAre(1, 2));
}

}  // namespace
}  // namespace lockstep
