#include "services/coordinator/scheduler.h"

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

}  // namespace
}  // namespace lockstep
