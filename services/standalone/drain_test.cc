// A coordinator's graceful stop (JobManager::Drain) and its stop without one, over real
// replicas in this process: the job continues after a restart and ends bit for bit where
// an undisturbed run does, its replayed steps shown as replays.
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/spec/testing.h"
#include "core/testing.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_testing.h"
#include "services/coordinator/storage/job_records.h"
#include "services/coordinator/storage/snapshot_store.h"
#include "services/standalone/testing.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

auto StepAtLeast(int64_t n) {
  return [n](const v1::JobEvent& e) { return e.has_step() && e.step().step() >= n; };
}

TEST(JobManagerDrain, ADrainedJobSnapshotsWaitsRecoveringAndEndsBitForBitAfterARestart) {
  InProcessWorkers workers(2);
  v1::JobSpec spec = SmallMlpSpec(2, 40);
  // No snapshot but the drain's: the restart continues from the one it took.
  spec.mutable_recovery()->set_snapshot_every_steps(100000);
  spec.mutable_recovery()->set_snapshot_every_seconds(100000);
  ASSERT_OK_AND_ASSIGN(const uint64_t clean, UndisturbedChecksum(workers, spec));
  ASSERT_NE(clean, 0u);

  // Removed after the coordinators below: the last record writes may follow a job's end.
  const ScratchDir scratch("lockstep-drain");
  const std::string dir = scratch.path().string();
  const CoordinatorOptions options = OptionsIn(dir);
  std::string id, queued_id;
  int64_t drained_at = 0;
  {
    InProcessCoordinator c(options, &workers);
    ASSERT_OK(c.jobs.Start());
    ASSERT_OK_AND_ASSIGN(v1::Job job, c.jobs.Submit(spec));
    id = job.id();
    ASSERT_OK(AwaitEvent(c.jobs, id, absl::Minutes(1), StepAtLeast(8)).status());
    ASSERT_OK_AND_ASSIGN(v1::Job queued, c.jobs.Submit(SmallMlpSpec(2, 4)));  // workers busy
    queued_id = queued.id();
    ASSERT_EQ(queued.state(), v1::QUEUED);
    // OK: the job reached its next step boundary and snapshotted there; one that did not
    // within the grace period is DEADLINE_EXCEEDED (aborted, back to its older snapshot).
    const absl::Time t0 = absl::Now();
    ASSERT_OK(c.jobs.Drain(t0 + absl::Seconds(20)));
    std::printf("drain of a running job: %.0f ms\n", absl::ToDoubleMilliseconds(absl::Now() - t0));
    ASSERT_OK_AND_ASSIGN(v1::Job drained, c.jobs.Get(id));
    EXPECT_EQ(drained.state(), v1::RECOVERING);  // CANCELLED at 400deec
    EXPECT_THAT(drained.failure_reason(),
                HasSubstr(absl::StrCat("continues from its snapshot of step ", drained.step())));
    EXPECT_EQ(drained.snapshot_step(), drained.step());
    EXPECT_GE(drained.step(), 8);
    EXPECT_LT(drained.step(), 40);
    drained_at = drained.step();
    EXPECT_EQ(c.jobs.Get(queued_id)->state(), v1::QUEUED);  // not started by the drain
    const std::vector<int64_t> kept = SnapshotStore(options.snapshot_dir + "/" + id, 1).Steps();
    ASSERT_FALSE(kept.empty());
    EXPECT_EQ(kept.back(), drained_at);
  }
  InProcessCoordinator c(options, &workers, /*with_workers=*/false);  // its workers come later
  ASSERT_OK(c.jobs.Start());
  ASSERT_OK_AND_ASSIGN(v1::Job waiting, c.jobs.Get(id));
  EXPECT_EQ(waiting.state(), v1::RECOVERING);  // QUEUED at step 0 at 400deec
  EXPECT_EQ(waiting.step(), drained_at);
  EXPECT_THAT(waiting.failure_reason(), HasSubstr("the coordinator restarted"));
  c.Register(workers);
  std::vector<v1::JobEvent> events;  // all of them, until the job's log closes
  ASSERT_OK_AND_ASSIGN(v1::Job done, AwaitEnd(c.jobs, id, absl::Minutes(2), &events));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_EQ(done.param_checksum(), clean);
  for (const v1::JobEvent& e : events) {  // it continued where it stopped: nothing replayed
    if (e.has_step()) {
      EXPECT_FALSE(e.step().replay()) << e.step().step();
    }
  }
  ASSERT_OK_AND_ASSIGN(v1::Job queued_done, AwaitEnd(c.jobs, queued_id, absl::Minutes(2)));
  EXPECT_EQ(queued_done.state(), v1::SUCCEEDED) << queued_done.failure_reason();
}

TEST(JobManagerDrain, AManagerStoppedWithoutADrainKeepsItsJobWhichReplaysVisibly) {
  InProcessWorkers workers(2);
  v1::JobSpec spec = SmallMlpSpec(2, 30);
  spec.mutable_recovery()->set_snapshot_every_steps(5);
  ASSERT_OK_AND_ASSIGN(const uint64_t clean, UndisturbedChecksum(workers, spec));

  // Removed after the coordinators below: the last record writes may follow a job's end.
  const ScratchDir scratch("lockstep-stop");
  const std::string dir = scratch.path().string();
  const CoordinatorOptions options = OptionsIn(dir);
  std::string id;
  int64_t stopped_at = 0;
  {
    InProcessCoordinator c(options, &workers);
    ASSERT_OK(c.jobs.Start());
    ASSERT_OK_AND_ASSIGN(v1::Job job, c.jobs.Submit(spec));
    id = job.id();
    ASSERT_OK(AwaitEvent(c.jobs, id, absl::Minutes(1), StepAtLeast(12)).status());
  }  // ~JobManager: CANCELLED at 400deec
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> on_disk, JobRecords(options.records_dir).Load());
  ASSERT_EQ(on_disk.size(), 1u);
  EXPECT_EQ(on_disk[0].state(), v1::RECOVERING);
  stopped_at = on_disk[0].step();
  ASSERT_GE(stopped_at, 12);

  InProcessCoordinator c(options, &workers);
  ASSERT_OK(c.jobs.Start());
  std::vector<v1::JobEvent> events;
  ASSERT_OK_AND_ASSIGN(v1::Job done, AwaitEnd(c.jobs, id, absl::Minutes(2), &events));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_EQ(done.param_checksum(), clean);
  // First the steps kept up to the snapshot it continues from (step 10 or later), as they
  // were; then, from that snapshot on, the steps up to where it stopped are replays, and
  // shown as such; the rest are not.
  int replays = 0, kept = 0;
  int64_t resumed_from = -1;  // the snapshot's step: the first step after the restart, less 1
  bool restarted = false;     // past the RECOVERING state event of the restart
  for (const v1::JobEvent& e : events) {
    if (e.has_state() && e.state().state() == v1::RECOVERING) restarted = true;
    if (!e.has_step()) continue;
    if (!restarted) {
      EXPECT_FALSE(e.step().replay()) << e.step().step();
      EXPECT_EQ(e.step().step(), ++kept);  // every step kept before the stop, in order
      continue;
    }
    if (resumed_from < 0) resumed_from = e.step().step() - 1;
    EXPECT_EQ(e.step().replay(), e.step().step() <= stopped_at) << e.step().step();
    replays += e.step().replay();
  }
  EXPECT_GE(kept, 10);
  // It continued from a snapshot (every 5 steps) at or before the stop, and the steps
  // from there to the stop are replays: none when it stopped right after a snapshot.
  EXPECT_GE(resumed_from, 10);
  EXPECT_LE(resumed_from, stopped_at);
  EXPECT_EQ(resumed_from % 5, 0) << resumed_from;
  EXPECT_EQ(replays, stopped_at - resumed_from);
}

// Stopped twice, the second time while it replays (its newer snapshots gone, it went back
// to an older one): the record's step is then a replay's, below the steps it had reached.
// After the second restart every step up to those it had ever reached is shown as a
// replay (at 0692893 only those up to the second stop's step were).
TEST(JobManagerDrain, AStopDuringAReplayKeepsTheStepsReachedBeforeAsReplays) {
  InProcessWorkers workers(2);
  v1::JobSpec spec = SmallMlpSpec(2, 40);
  spec.mutable_recovery()->set_snapshot_every_steps(5);
  spec.mutable_recovery()->set_snapshots_kept(10);
  const ScratchDir scratch("lockstep-replay-stop");
  const CoordinatorOptions options = OptionsIn(scratch.path().string());
  std::string id;
  const auto stop_at_step = [&](int64_t n) -> v1::Job {
    {
      InProcessCoordinator c(options, &workers);
      EXPECT_OK(c.jobs.Start());
      if (id.empty()) id = c.jobs.Submit(spec)->id();
      EXPECT_OK(AwaitEvent(c.jobs, id, absl::Minutes(1), StepAtLeast(n)).status());
    }  // ~JobManager: recorded RECOVERING
    absl::StatusOr<std::vector<v1::Job>> on_disk = JobRecords(options.records_dir).Load();
    EXPECT_TRUE(on_disk.ok() && on_disk->size() == 1u);
    return on_disk.ok() && !on_disk->empty() ? on_disk->front() : v1::Job();
  };
  const v1::Job first = stop_at_step(27);
  const int64_t reached = first.step();
  ASSERT_GE(reached, 27);
  // Its snapshots past step 10 are gone: the next run goes back to step 10.
  const SnapshotStore snapshots(options.snapshot_dir + "/" + id, 1);
  for (int64_t step : snapshots.Steps()) {
    if (step > 10) std::filesystem::remove(snapshots.PathOf(step));
  }
  ASSERT_FALSE(snapshots.Steps().empty());
  ASSERT_EQ(snapshots.Steps().back(), 10);
  const v1::Job second = stop_at_step(13);
  ASSERT_LT(second.step(), reached) << "the second run went past the first's steps";
  EXPECT_EQ(second.high_water_step(), reached);

  InProcessCoordinator c(options, &workers);
  ASSERT_OK(c.jobs.Start());
  std::vector<v1::JobEvent> events;
  ASSERT_OK_AND_ASSIGN(v1::Job done, AwaitEnd(c.jobs, id, absl::Minutes(2), &events));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  bool restarted = false;
  int replays = 0;
  for (const v1::JobEvent& e : events) {
    if (e.has_state() && e.state().state() == v1::RECOVERING) restarted = true;
    if (!restarted || !e.has_step()) continue;
    EXPECT_EQ(e.step().replay(), e.step().step() <= reached) << e.step().step();
    replays += e.step().replay();
  }
  EXPECT_GE(replays, reached - second.step());
}

}  // namespace
}  // namespace lockstep::testing
