// The job's audit (JobSpec.audit, docs/audit.md) against real replicas in this process
// (JobSlots on the CPU, Gloo on loopback): honest workers train bit for bit as without
// it; a worker that corrupts its gradients (a test-only fault on its JobSlot) is caught,
// quarantined and replaced, and the job ends with the honest checksum.

#include <atomic>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/spec/testing.h"
#include "core/status_macros.h"
#include "core/testing.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_testing.h"
#include "services/standalone/audit_testing.h"
#include "services/standalone/testing.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

TEST(Audit, HonestWorkersEndBitForBitAsWithoutAnAudit) {
  for (int n : {2, 3}) {
    InProcessWorkers workers(n);
    Recorder plain_sink, audited_sink;
    ASSERT_OK_AND_ASSIGN(JobOutcome plain, RunOn(workers, Spec(n, 20, 0), "plain", &plain_sink));
    SpareSupply supply(workers.pool_workers(), n);  // as on a cluster: the job recovers
    ASSERT_OK_AND_ASSIGN(JobOutcome audited,
                         RunOn(workers, Spec(n, 20, 5), "audited", &audited_sink, &supply));
    EXPECT_EQ(audited.param_checksum, plain.param_checksum) << n << " workers";
    EXPECT_EQ(audited.audits, 4);  // after steps 5, 10, 15, 20
    EXPECT_EQ(audited.audits_failed, 0);
    EXPECT_EQ(audited.recoveries, 0);
    ASSERT_EQ(audited_sink.steps.size(), 20u);
    for (const v1::StepEvent& e : audited_sink.steps) {
      if (e.step() % 5 == 0) {
        EXPECT_THAT(e.audit(), HasSubstr("passed: shard of rank")) << e.step();
      } else {
        EXPECT_EQ(e.audit(), "") << e.step();
      }
      EXPECT_EQ(e.loss(), plain_sink.steps[e.step() - 1].loss()) << e.step();
    }
  }
}

TEST(Audit, ALiarAmongThreeIsQuarantinedAndTheJobEndsWithTheHonestChecksum) {
  InProcessWorkers honest(3);
  Recorder honest_sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, RunOn(honest, Spec(3, 30, 0), "clean", &honest_sink));

  InProcessWorkers workers(4);  // ranks 0..2 and a spare
  workers.slot(1).SetGradientFaultForTesting(Double);
  {
    // Unaudited, the lie goes unnoticed (the replicas agree: the doubled gradients are in
    // every one's all-reduce) and ends elsewhere.
    Recorder unaudited_sink;
    ASSERT_OK_AND_ASSIGN(JobOutcome unaudited,
                         RunOn(workers, Spec(3, 30, 0), "unaudited", &unaudited_sink));
    EXPECT_NE(unaudited.param_checksum, clean.param_checksum);
    EXPECT_EQ(unaudited.recoveries, 0);
  }
  SpareSupply supply(workers.pool_workers(), 3);
  Recorder sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome out, RunOn(workers, Spec(3, 30, 5), "liar", &sink, &supply));
  EXPECT_EQ(out.param_checksum, clean.param_checksum);
  EXPECT_EQ(out.recoveries, 1);
  EXPECT_EQ(out.audits_failed, 1);
  EXPECT_EQ(out.quarantined, std::vector<std::string>{"w1"});
  EXPECT_EQ(supply.quarantined, std::vector<std::string>{"w1"});
  ASSERT_EQ(supply.reasons.size(), 1u);
  // Three workers: every audit involves all of them, so the first one catches the liar,
  // and the job starts again from step 0 (no snapshot yet).
  EXPECT_THAT(supply.reasons[0],
              HasSubstr("audit of step 5 failed: worker w1 lied (outvoted by its checkers) and "
                        "is quarantined; the job rolls back to step 0, its last snapshot (or "
                        "start)"));
  EXPECT_EQ(out.replayed_steps, 4);
  EXPECT_EQ(sink.steps.back().loss(), honest_sink.steps.back().loss());
}

TEST(Audit, ALiarFromAStepOnRollsBackToTheLastAuditThatPassed) {
  InProcessWorkers honest(3);
  Recorder honest_sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, RunOn(honest, Spec(3, 30, 5), "clean", &honest_sink));

  InProcessWorkers workers(4);
  // Honest until the snapshot of step 10 (taken with no step in flight); from step 11 on
  // it lies on every gradient, its own steps' and its recomputations alike.
  auto lying = std::make_shared<std::atomic<bool>>(false);
  workers.slot(2).SetGradientFaultForTesting([lying](Backend& b, float* g, size_t n) {
    return lying->load() ? Double(b, g, n) : absl::OkStatus();
  });
  SpareSupply supply(workers.pool_workers(), 3);
  class Flip final : public JobSink {
   public:
    explicit Flip(std::shared_ptr<std::atomic<bool>> lying) : lying_(std::move(lying)) {}
    void OnRunning(int64_t) override {}
    void OnStep(const v1::StepEvent&) override {}
    void OnEval(const v1::EvalResult&) override {}
    void OnSnapshot(int64_t step, uint64_t, bool) override {
      if (step == 10) lying_->store(true);
    }

   private:
    std::shared_ptr<std::atomic<bool>> lying_;
  } sink(lying);
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("from-a-step");
  std::vector<PoolWorker> first = workers.pool_workers();
  first.resize(3);
  v1::JobSpec spec = Spec(3, 30, 5);
  spec.mutable_recovery()->set_snapshot_every_steps(5);  // each one audited
  JobRunner runner("from-a-step", spec, first, workers.factory(), options, &sink, &supply);
  supply.runner = &runner;
  JobOutcome out;
  ASSERT_OK(runner.Run(&out));
  std::filesystem::remove_all(options.checkpoint_dir);
  EXPECT_EQ(out.param_checksum, clean.param_checksum);
  EXPECT_EQ(out.quarantined, std::vector<std::string>{"w2"});
  ASSERT_EQ(supply.reasons.size(), 1u);
  // The audits of steps 5 and 10 passed (a snapshot at each); with three workers every
  // audit involves the liar: the one of step 15 catches it, and the job goes back to 10.
  EXPECT_THAT(supply.reasons[0], HasSubstr("audit of step 15 failed: worker w2 lied"));
  EXPECT_THAT(supply.reasons[0], HasSubstr("the job rolls back to step 10, its last snapshot"));
  EXPECT_EQ(out.replayed_steps, 4);  // 11 to 14
}

// Nothing in the spec about the audit: two workers are audited every 100 steps, and the
// liar among them is caught at step 100.
TEST(Audit, TheDefaultCatchesALiarInATwoWorkerJob) {
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, Undisturbed(Spec(2, 110, 0)));
  const v1::JobSpec spec = Spec(2, 110, std::nullopt);
  ASSERT_EQ(spec.audit().every_steps(), 100u);
  SparedRun run = RunWithLiar(4, 1, spec, "default");
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->param_checksum, clean.param_checksum);
  ASSERT_EQ(run.reasons.size(), 1u);
  EXPECT_THAT(run.reasons[0], HasSubstr("audit of step 100 failed: no majority"));
  EXPECT_EQ(run.out->audits_failed, 1);
}

// Each step the job snapshots after is audited, whatever every_steps says: a liar is
// caught there, and the snapshot is not taken (the job goes back to its start).
TEST(Audit, EverySnapshotStepIsAuditedAndALiarThereLeavesNoSnapshot) {
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, Undisturbed(Spec(3, 20, 0)));
  v1::JobSpec spec = Spec(3, 20, 100);
  spec.mutable_recovery()->set_snapshot_every_steps(8);
  SparedRun run = RunWithLiar(4, 2, spec, "snapshot");
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->param_checksum, clean.param_checksum);
  EXPECT_EQ(run.out->quarantined, std::vector<std::string>{"w2"});
  ASSERT_EQ(run.reasons.size(), 1u);
  EXPECT_THAT(run.reasons[0],
              HasSubstr("audit of step 8 failed: worker w2 lied (outvoted by its checkers) and "
                        "is quarantined; the job rolls back to step 0"));
  EXPECT_EQ(run.out->replayed_steps, 7);  // 1 to 7
}

// Logical replicas: the audited shard is a worker's first replica, recomputed by others;
// its bits do not depend on where it runs.
TEST(Audit, LogicalReplicasAreAuditedAndALiarAmongThreeIsQuarantined) {
  InProcessWorkers honest(3);
  Recorder clean_sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, RunOn(honest, Spec(3, 20, 0, 6), "clean", &clean_sink));
  {
    SpareSupply supply(honest.pool_workers(), 3);
    Recorder sink;
    ASSERT_OK_AND_ASSIGN(JobOutcome audited,
                         RunOn(honest, Spec(3, 20, 5, 6), "audited", &sink, &supply));
    EXPECT_EQ(audited.param_checksum, clean.param_checksum);
    EXPECT_EQ(audited.audits, 4);
    EXPECT_EQ(audited.audits_failed, 0);
    EXPECT_THAT(sink.steps[4].audit(), HasSubstr("passed: shard of rank"));
  }
  SparedRun run = RunWithLiar(4, 1, Spec(3, 20, 5, 6), "liar");  // ranks 0..2 and a spare
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->param_checksum, clean.param_checksum);
  EXPECT_EQ(run.out->quarantined, std::vector<std::string>{"w1"});
  ASSERT_EQ(run.reasons.size(), 1u);
  EXPECT_THAT(run.reasons[0], HasSubstr("audit of step 5 failed: worker w1 lied"));
}

TEST(Audit, TwoWorkersThatDisagreeAreBothReplacedAndNeitherQuarantined) {
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, Undisturbed(Spec(2, 20, 0)));
  SparedRun run = RunWithLiar(4, 0, Spec(2, 20, 5), "pair");
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->param_checksum, clean.param_checksum);
  EXPECT_TRUE(run.out->quarantined.empty());
  ASSERT_EQ(run.reasons.size(), 1u);
  EXPECT_THAT(run.reasons[0], HasSubstr("audit of step 5 failed: no majority, so workers w"));
  EXPECT_THAT(run.reasons[0], HasSubstr("are replaced (none quarantined)"));
}

TEST(Audit, WithoutRecoveryALiarFailsTheJobNamingIt) {
  InProcessWorkers workers(3);
  workers.slot(1).SetGradientFaultForTesting(Double);
  Recorder sink;
  EXPECT_THAT(
      RunOn(workers, Spec(3, 20, 5), "no-supply", &sink),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr("audit of step 5 failed: worker w1 lied (outvoted by its checkers); the "
                         "job has no recovery")));
}

TEST(Audit, TheCoordinatorQuarantinesTheLiarItsEventsSayWhoAndAtWhichStep) {
  InProcessWorkers honest(3);
  Recorder honest_sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, RunOn(honest, Spec(3, 20, 0), "clean", &honest_sink));

  InProcessWorkers workers(4);
  workers.slot(1).SetGradientFaultForTesting(Double);
  const std::string dir = TempDir("manager");
  CoordinatorOptions options;
  options.checkpoint_dir = dir + "/checkpoints";
  options.snapshot_dir = dir + "/snapshots";
  WorkerPool pool(absl::Hours(1));
  JobManager jobs(options, &pool, nullptr, workers.factory());
  const std::vector<PoolWorker> all = workers.pool_workers();
  std::vector<std::string> ids;  // the pool's, in slot order
  for (const PoolWorker& w : all) ids.push_back(pool.Register(w.address, "cpu", w.id, 1));
  ASSERT_OK(jobs.Start());
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs.Submit(Spec(3, 20, 5)));
  std::vector<v1::JobEvent> events;
  ASSERT_OK_AND_ASSIGN(v1::Job done, AwaitEnd(jobs, job.id(), absl::Minutes(2), &events));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_EQ(done.param_checksum(), clean.param_checksum);
  EXPECT_EQ(done.recoveries(), 1);
  int recovering = 0;
  for (const v1::JobEvent& e : events) {
    if (!e.has_state() || e.state().state() != v1::RECOVERING) continue;
    ++recovering;
    EXPECT_THAT(e.state().reason(),
                HasSubstr(absl::StrCat("audit of step 5 failed: worker ", ids[1],
                                       " lied (outvoted by its checkers) and is quarantined")));
  }
  EXPECT_EQ(recovering, 1);
  // The recovery dropped it from the pool; registering again (as a restarted worker
  // would), it is listed as quarantined and gets no work.
  const std::string again = pool.Register(all[1].address, "cpu", "w1", 1);
  bool listed = false;
  for (const v1::WorkerInfo& w : pool.List()) {
    if (w.id() != again) continue;
    listed = true;
    EXPECT_THAT(w.quarantined(), HasSubstr("audit of step 5 failed"));
  }
  EXPECT_TRUE(listed);
  for (const WorkerView& v : pool.Views()) EXPECT_NE(v.id, again);
  std::filesystem::remove_all(dir);
}

// A BatchNorm job on logical replicas on 2 or more workers has the shard audit: the
// checker computes the audited replica beside its own (StepExecutor::RideAlong) and
// compares its gradients, loss and BatchNorm contributions. No worker is lent, no replay.
TEST(Audit, ABatchNormJobOnReplicasHasTheShardAuditAndEndsBitForBit) {
  const v1::JobSpec spec = BatchNormOnReplicas(20);
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, Undisturbed(spec));
  InProcessWorkers workers(3);
  SparedRun run = RunWithSpares(workers, spec, "bn");
  ASSERT_OK(run.out.status());
  EXPECT_EQ(run.out->param_checksum, clean.param_checksum);
  EXPECT_EQ(run.out->audits, 3);  // the snapshot steps 5, 10, 15
  EXPECT_EQ(run.out->audits_failed, 0);
  EXPECT_TRUE(run.notes.empty());  // no replay
  for (const v1::StepEvent& e : run.steps) {
    if (e.step() % 5 == 0 && e.step() < 20) {
      EXPECT_THAT(e.audit(), HasSubstr("passed: shard of rank")) << e.step();
      EXPECT_THAT(e.audit(), HasSubstr(" statistics ")) << e.step();
    } else {
      EXPECT_EQ(e.audit(), "") << e.step();
    }
  }
}

// A liar in its gradients, and one in its BatchNorm statistics only (its gradients then
// agree with the checker's: both are computed from the same wrong job-wide sums), is
// caught at the first audited step; with 2 workers nobody can tell which lied: both are
// replaced, and the job ends with the undisturbed checksum.
TEST(Audit, ABatchNormJobOnReplicasCatchesALiarInItsGradientsOrStatistics) {
  const v1::JobSpec spec = BatchNormOnReplicas(20);
  ASSERT_OK_AND_ASSIGN(JobOutcome clean, Undisturbed(spec));
  for (bool statistics : {false, true}) {
    InProcessWorkers workers(4);  // w0, w1 the job's; w2, w3 spares
    if (statistics) {
      workers.slot(1).SetStatisticsFaultForTesting(
          [](Backend& b, float* x, size_t n) { return b.Divide(n, 0.99f, x); });
    } else {
      workers.slot(1).SetGradientFaultForTesting(Double);
    }
    SparedRun run = RunWithSpares(workers, spec, statistics ? "bn-stats-liar" : "bn-liar");
    ASSERT_TRUE(run.out.ok()) << statistics << ": " << run.out.status();
    EXPECT_EQ(run.out->param_checksum, clean.param_checksum) << statistics;
    EXPECT_EQ(run.out->audits_failed, 1) << statistics;
    ASSERT_EQ(run.reasons.size(), 1u) << statistics;
    EXPECT_THAT(run.reasons[0], HasSubstr("audit of step 5 failed: no majority")) << statistics;
    EXPECT_THAT(run.reasons[0], HasSubstr(" statistics ")) << statistics;
  }
}

}  // namespace
}  // namespace lockstep::testing
