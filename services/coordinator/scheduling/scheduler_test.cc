#include "services/coordinator/scheduling/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

std::vector<WorkerView> Cpus(int n, uint32_t threads = 2) {
  std::vector<WorkerView> w;
  for (int i = 0; i < n; ++i) w.push_back({"w" + std::to_string(i), "cpu", threads, true});
  return w;
}

TEST(Scheduler, StartsJobsInQueueOrderOnTheEarliestFreeWorkers) {
  auto workers = Cpus(4);
  workers[0].free = false;
  const Schedule s = PlanSchedule({{"a", 2}, {"b", 1}}, workers);
  ASSERT_EQ(s.start.size(), 2u);
  EXPECT_EQ(s.start[0].job_id, "a");
  EXPECT_THAT(s.start[0].worker_ids, ElementsAre("w1", "w2"));
  EXPECT_EQ(s.start[1].job_id, "b");
  EXPECT_THAT(s.start[1].worker_ids, ElementsAre("w3"));
  EXPECT_THAT(s.waiting_for, IsEmpty());
}

TEST(Scheduler, AJobThatDoesNotFitTheFreeWorkersHoldsBackTheJobsBehindIt) {
  auto workers = Cpus(3);
  workers[0].free = false;
  workers[1].free = false;
  const Schedule s = PlanSchedule({{"big", 3}, {"small", 1}}, workers);
  EXPECT_THAT(s.start, IsEmpty());
  EXPECT_THAT(s.waiting_for,
              UnorderedElementsAre(Pair("big", "3 free cpu workers"),
                                   Pair("small", "the jobs ahead of it in the queue")));
}

TEST(Scheduler, AJobTooBigForThePoolIsPassedOverUntilEnoughRegister) {
  const Schedule s = PlanSchedule({{"huge", 5}, {"small", 1}}, Cpus(2));
  ASSERT_EQ(s.start.size(), 1u);
  EXPECT_EQ(s.start[0].job_id, "small");
  EXPECT_THAT(s.waiting_for, UnorderedElementsAre(Pair("huge", "5 cpu workers (2 registered)")));
}

TEST(Scheduler, AnElasticJobStartsOnAsManyFreeWorkersAsThereAreFromItsFewestToItsMost) {
  JobDemand elastic{"e", 4};
  elastic.min_workers = 2;
  auto workers = Cpus(5);
  workers[0].free = false;
  workers[1].free = false;
  Schedule s = PlanSchedule({elastic, {"next", 1}}, workers);
  ASSERT_EQ(s.start.size(), 1u);  // 3 free: all of them, none left for the next
  EXPECT_THAT(s.start[0].worker_ids, ElementsAre("w2", "w3", "w4"));
  EXPECT_THAT(s.waiting_for, UnorderedElementsAre(Pair("next", "1 free cpu worker")));
  s = PlanSchedule({elastic}, Cpus(6));  // never more than its most
  ASSERT_EQ(s.start.size(), 1u);
  EXPECT_EQ(s.start[0].worker_ids.size(), 4u);
  workers[2].free = false;
  workers[3].free = false;  // 1 free: fewer than its fewest
  s = PlanSchedule({elastic, {"small", 1}}, workers);
  EXPECT_THAT(s.start, IsEmpty());
  EXPECT_THAT(s.waiting_for,
              UnorderedElementsAre(Pair("e", "2 to 4 free cpu workers"),
                                   Pair("small", "the jobs ahead of it in the queue")));
}

// At 400deec: "1 free cpu workers".
TEST(Scheduler, OneWorkerIsSaidInTheSingular) {
  auto workers = Cpus(2);
  workers[0].free = false;
  workers[1].free = false;
  EXPECT_THAT(PlanSchedule({{"one", 1}}, workers).waiting_for,
              UnorderedElementsAre(Pair("one", "1 free cpu worker")));
  EXPECT_THAT(PlanSchedule({{"one", 1}}, {}).waiting_for,
              UnorderedElementsAre(Pair("one", "1 cpu worker (0 registered)")));
}

TEST(Scheduler, DevicesMatchAndCudaMeansAnyGpu) {
  std::vector<WorkerView> workers = {
      {"c", "cpu", 2, true}, {"g0", "cuda:0", 1, true}, {"g1", "cuda:1", 1, true}};
  const Schedule s = PlanSchedule({{"gpu", 2, "cuda"}, {"cpu", 1, "cpu"}}, workers);
  ASSERT_EQ(s.start.size(), 2u);
  EXPECT_THAT(s.start[0].worker_ids, ElementsAre("g0", "g1"));
  EXPECT_THAT(s.start[1].worker_ids, ElementsAre("c"));
}

TEST(Scheduler, ACpuJobAskingForThreadsRunsOnlyOnWorkersWithThatMany) {
  std::vector<WorkerView> workers = {{"small", "cpu", 1, true}, {"big", "cpu", 4, true}};
  Schedule s = PlanSchedule({{"j", 1, "cpu", 4}}, workers);
  ASSERT_EQ(s.start.size(), 1u);
  EXPECT_THAT(s.start[0].worker_ids, ElementsAre("big"));
  s = PlanSchedule({{"j", 2, "cpu", 2}}, workers);
  EXPECT_THAT(s.waiting_for,
              UnorderedElementsAre(Pair("j", "2 cpu workers with 2 threads (1 registered)")));
  // Threads do not apply to GPU jobs.
  EXPECT_TRUE(Suits({"g", "cuda:0", 0, true}, {"j", 1, "cuda", 8}));
}

TEST(Scheduler, AnOwnerAtTheirRunningLimitIsPassedOverAndHoldsBackNoOneElse) {
  // alice may start one more job; her second waits, and bob's behind it starts.
  std::map<std::string, OwnerSlots> owners = {{"alice", {1, "user alice: limit"}}};
  const Schedule s = PlanSchedule(
      {{"a1", 1, "cpu", 0, "alice"}, {"a2", 1, "cpu", 0, "alice"}, {"b1", 1, "cpu", 0, "bob"}},
      Cpus(3), owners);
  ASSERT_EQ(s.start.size(), 2u);
  EXPECT_EQ(s.start[0].job_id, "a1");
  EXPECT_EQ(s.start[1].job_id, "b1");
  EXPECT_THAT(s.waiting_for, UnorderedElementsAre(Pair("a2", "user alice: limit")));
  // A recovering job holds its owner's slot already: it is not held back by the limit.
  owners["alice"].free = 0;
  const Schedule r = PlanSchedule(
      {{"a0", 1, "cpu", 0, "alice", /*recovering=*/true}, {"a3", 1, "cpu", 0, "alice"}}, Cpus(2),
      owners);
  ASSERT_EQ(r.start.size(), 1u);
  EXPECT_EQ(r.start[0].job_id, "a0");
  EXPECT_THAT(r.waiting_for, UnorderedElementsAre(Pair("a3", "user alice: limit")));
}

TEST(Scheduler, HigherPriorityFirstThenArrival) {
  JobDemand low{"low", 2}, high{"high", 2}, also_high{"also-high", 1}, mid{"mid", 1};
  high.priority = also_high.priority = 5;
  mid.priority = 1;
  Schedule s = PlanSchedule({low, high, mid, also_high}, Cpus(3));
  ASSERT_EQ(s.start.size(), 2u);
  EXPECT_EQ(s.start[0].job_id, "high");
  EXPECT_EQ(s.start[1].job_id, "also-high");
  // The next in line (mid, priority 1) is the one held back for free workers; low waits
  // behind it.
  EXPECT_EQ(s.blocked, "mid");
  EXPECT_THAT(s.waiting_for,
              UnorderedElementsAre(Pair("mid", "1 free cpu worker"),
                                   Pair("low", "the jobs ahead of it in the queue")));
  EXPECT_EQ(PlanSchedule({low, mid}, Cpus(3)).blocked, "");  // both start
}

JobDemand Wanting(const std::string& id, int workers, int priority, int min = 0) {
  JobDemand d{id, workers};
  d.priority = priority;
  d.min_workers = min;
  return d;
}

// `n` cpu workers, w0.., the first `busy` of them busy.
std::vector<WorkerView> Busy(int n, int busy) {
  auto w = Cpus(n);
  for (int i = 0; i < busy; ++i) w[i].free = false;
  return w;
}

TEST(Preemption, TakesFromLowerPriorityElasticJobsDownToTheirMinLastRanksFirst) {
  // e1 (priority 0, min 1) runs on w0-w2, e2 (priority 1, min 2) on w3-w5; w6 is free.
  const std::vector<RunningJob> running = {{"e1", 0, 1, true, {"w0", "w1", "w2"}},
                                           {"e2", 1, 2, true, {"w3", "w4", "w5"}}};
  std::optional<Preemption> p = PlanPreemption(Wanting("hi", 3, 5), running, Busy(7, 6));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->job_id, "hi");
  // 2 more needed: the lowest priority gives both, one job disturbed.
  EXPECT_THAT(p->shrink, ElementsAre(Pair("e1", ElementsAre("w2", "w1"))));
  EXPECT_THAT(p->suspend, IsEmpty());
  // 3 more needed: e1 down to its min (2), e2 down to its min (1); never below.
  p = PlanPreemption(Wanting("hi", 4, 5), running, Busy(7, 6));
  ASSERT_TRUE(p.has_value());
  EXPECT_THAT(p->shrink,
              ElementsAre(Pair("e1", ElementsAre("w2", "w1")), Pair("e2", ElementsAre("w5"))));
  // 4 more: more than both can give, and nothing to suspend.
  EXPECT_FALSE(PlanPreemption(Wanting("hi", 5, 5), running, Busy(7, 6)).has_value());
}

TEST(Preemption, WithinAPriorityTheJobWithTheMostToGiveFirst) {
  const std::vector<RunningJob> running = {{"small", 0, 1, true, {"w0", "w1"}},
                                           {"big", 0, 1, true, {"w2", "w3", "w4"}}};
  std::optional<Preemption> p = PlanPreemption(Wanting("hi", 2, 1), running, Busy(5, 5));
  ASSERT_TRUE(p.has_value());
  EXPECT_THAT(p->shrink, ElementsAre(Pair("big", ElementsAre("w4", "w3"))));
}

TEST(Preemption, NeverAnEqualOrHigherPriorityJob) {
  const std::vector<RunningJob> running = {{"same", 3, 1, true, {"w0", "w1", "w2"}},
                                           {"higher", 4, 0, true, {"w3"}}};
  EXPECT_FALSE(PlanPreemption(Wanting("j", 2, 3), running, Busy(4, 4)).has_value());
  EXPECT_FALSE(PlanPreemption(Wanting("j", 1, 3), running, Busy(4, 4)).has_value());
}

TEST(Preemption, SuspendsAJobThatCannotShrinkOnlyForWhatShrinkingCannotGive) {
  // fixed (priority 0, not elastic) on w0-w1; e (priority 0, min 2) on w2-w4; w5 free.
  const std::vector<RunningJob> running = {{"fixed", 0, 0, true, {"w0", "w1"}},
                                           {"e", 0, 2, true, {"w2", "w3", "w4"}}};
  // 1 more needed: e shrinks by one, nobody is suspended.
  std::optional<Preemption> p = PlanPreemption(Wanting("hi", 2, 9), running, Busy(6, 5));
  ASSERT_TRUE(p.has_value());
  EXPECT_THAT(p->shrink, ElementsAre(Pair("e", ElementsAre("w4"))));
  EXPECT_THAT(p->suspend, IsEmpty());
  // 3 more: e gives 1 at most, so fixed is suspended (2); nothing else is shrunk for it.
  p = PlanPreemption(Wanting("hi", 4, 9), running, Busy(6, 5));
  ASSERT_TRUE(p.has_value());
  EXPECT_THAT(p->suspend, ElementsAre("fixed"));
  EXPECT_THAT(p->shrink, ElementsAre(Pair("e", ElementsAre("w4"))));
  p = PlanPreemption(Wanting("hi", 3, 9), running, Busy(6, 5));  // 2 more: fixed alone
  ASSERT_TRUE(p.has_value());
  EXPECT_THAT(p->suspend, ElementsAre("fixed"));
  EXPECT_THAT(p->shrink, IsEmpty());
  // One that may not be suspended (stopping already) is not.
  std::vector<RunningJob> stopping = running;
  stopping[0].suspendable = false;
  EXPECT_FALSE(PlanPreemption(Wanting("hi", 3, 9), stopping, Busy(6, 5)).has_value());
}

TEST(Preemption, CountsOnlyWorkersThatSuitTheJobAndNothingWhenItLacksNone) {
  std::vector<WorkerView> workers = {{"c0", "cpu", 2, false},
                                     {"g0", "cuda:0", 1, false},
                                     {"g1", "cuda:1", 1, false},
                                     {"c1", "cpu", 2, true}};
  const std::vector<RunningJob> running = {{"mixed", 0, 1, true, {"c0", "g0", "g1"}}};
  std::optional<Preemption> p = PlanPreemption(Wanting("cpu", 2, 1), running, workers);
  ASSERT_TRUE(p.has_value());  // c1 is free; c0 is the only cpu worker mixed can give
  EXPECT_THAT(p->shrink, ElementsAre(Pair("mixed", ElementsAre("c0"))));
  EXPECT_FALSE(PlanPreemption(Wanting("cpu", 1, 1), running, workers).has_value());
}

}  // namespace
}  // namespace lockstep
