#include "services/coordinator/jobs/job_runner.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "core/spec/testing.h"
#include "core/testing.h"
#include "services/coordinator/workers/fake_worker_client.h"

namespace lockstep::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::JobSpec Spec(int workers) {
  return ValidSpec(absl::StrCat(R"(
model: {kind: mlp, hidden: [8]}
optimizer: {kind: sgd, learning_rate: 0.1}
global_batch_size: 8
steps: 6
eval: {every_steps: 3}
workers: )",
                                workers));
}

std::vector<PoolWorker> Workers(int n) {
  std::vector<PoolWorker> w(n);
  for (int r = 0; r < n; ++r) {
    w[r].id = absl::StrCat("w", r);
    w[r].address = absl::StrCat("fake:", r);
  }
  return w;
}

class RecordingSink final : public JobSink {
 public:
  void OnRunning(int64_t total) override { total_steps = total; }
  void OnStep(const v1::StepEvent& e) override {
    steps.push_back(e);
    if (on_step) on_step(e);
  }
  std::function<void(const v1::StepEvent&)> on_step;  // on the runner's thread
  void OnEval(const v1::EvalResult& r) override { evals.push_back(r); }
  void OnNote(const std::string& why) override { notes.push_back(why); }
  std::vector<std::string> notes;
  int64_t total_steps = 0;
  std::vector<v1::StepEvent> steps;
  std::vector<v1::EvalResult> evals;
};

TEST(JobRunnerTest, RunsTheStepsAveragingTheWorkersLossesAndEvaluatesOnCadence) {
  FakeClientFactory factory;
  RecordingSink sink;
  JobRunner runner("job-1", Spec(2), Workers(2), &factory, CoordinatorOptions(), &sink);
  JobOutcome out;
  ASSERT_OK(runner.Run(&out));
  EXPECT_EQ(sink.total_steps, 6);
  ASSERT_EQ(sink.steps.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(sink.steps[i].step(), i + 1);
    // Each fake answers loss = rank + its shard's 4 samples: the mean of 4 and 5.
    EXPECT_THAT(sink.steps[i].local_losses(), ElementsAre(4.0f, 5.0f));
    EXPECT_EQ(sink.steps[i].loss(), 4.5f);
  }
  ASSERT_EQ(sink.evals.size(), 2u);  // every 3 steps; the last one is the final evaluation
  EXPECT_EQ(sink.evals[0].step(), 3);
  EXPECT_EQ(sink.evals[1].step(), 6);
  EXPECT_EQ(sink.evals[1].examples(), 20);  // the test split, shared between the workers
  EXPECT_DOUBLE_EQ(sink.evals[1].test_loss(), 0.5);
  EXPECT_DOUBLE_EQ(sink.evals[1].test_accuracy(), 0.5);
  EXPECT_TRUE(out.checkpoint_path.empty());  // none asked for
  for (FakeClient* c : factory.clients) EXPECT_THAT(c->releases(), ElementsAre("job finished"));
}

TEST(JobRunnerTest, AStepErrorFailsTheJobNamingTheWorkerAndReleasesEveryone) {
  FakeClientFactory factory({FakeWorker{}, FakeWorker{.steps = Behaviour::kFail}});
  RecordingSink sink;
  JobRunner runner("job-1", Spec(2), Workers(2), &factory, CoordinatorOptions(), &sink);
  JobOutcome out;
  const absl::Status st = runner.Run(&out);
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kUnavailable,
                           HasSubstr("worker w1 (fake:1, rank 1): connection reset")));
  for (FakeClient* c : factory.clients) {
    EXPECT_THAT(c->releases(), ElementsAre(std::string(st.message())));
  }
}

TEST(JobRunnerTest, AbortCancelsAPrepareInFlight) {
  FakeClientFactory factory({FakeWorker{.hang_prepare = true}, FakeWorker{.hang_prepare = true}});
  RecordingSink sink;
  JobRunner runner("job-1", Spec(2), Workers(2), &factory, CoordinatorOptions(), &sink);
  absl::Status st;
  std::thread run([&] {
    JobOutcome out;
    st = runner.Run(&out);
  });
  for (FakeClient* c : factory.clients) c->AwaitPrepare();
  runner.Abort(absl::CancelledError("cancelled by the user"));
  run.join();
  // Ended by the abort, not by the minute a hung Prepare lasts.
  for (FakeClient* c : factory.clients) EXPECT_TRUE(c->prepare_cancelled());
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kCancelled, "cancelled by the user"));
  EXPECT_TRUE(sink.steps.empty());
  for (FakeClient* c : factory.clients) {
    EXPECT_THAT(c->releases(), ElementsAre("cancelled by the user"));
  }
}

// Gives a job `replacements` when it is recovering (its runner's events), no workers to grow
// onto, and records what its runner says.
class SpareSupply final : public WorkerSupply {
 public:
  explicit SpareSupply(std::vector<PoolWorker> replacements = {})
      : replacements_(std::move(replacements)) {}
  void Recovering(const std::vector<std::string>& lost, const absl::Status& reason,
                  absl::Duration) override {
    replaced.push_back(reason);
    this->lost.push_back(lost);
    if (replacements_.empty()) {
      runner->NoWorkers(absl::DeadlineExceededError("no spares"));
    } else {
      runner->GiveWorkers(replacements_);
    }
  }
  JobRunner* runner = nullptr;  // whose supply it is
  void Resized(const std::vector<PoolWorker>& workers, const std::vector<std::string>& lost,
               const std::string& why, const std::vector<std::string>& released) override {
    resized.push_back(why);
    this->released.push_back(released);
    resized_lost.push_back(lost);
    EXPECT_EQ(workers.size(), 2u);
  }
  std::vector<absl::Status> replaced;
  std::vector<std::vector<std::string>> lost, released, resized_lost;
  std::vector<std::string> resized;

 private:
  const std::vector<PoolWorker> replacements_;
};

// 12 steps, an evaluation every 4; `workers` a number or a range.
v1::JobSpec LongSpec(const std::string& workers, bool logical) {
  return ValidSpec(absl::StrCat(R"(
model: {kind: mlp, hidden: [8]}
optimizer: {kind: sgd, learning_rate: 0.1}
global_batch_size: 12
steps: 12
eval: {every_steps: 4}
recovery: {max_restarts: 0}
)",
                                logical ? "replicas: 4\n" : "", "workers: ", workers));
}

// The job run undisturbed on `n` workers: its final checksum (its events in *events).
uint64_t Undisturbed(const v1::JobSpec& spec, int n, RecordingSink* events = nullptr) {
  FakeClientFactory factory;
  RecordingSink own;
  RecordingSink& sink = events != nullptr ? *events : own;
  SpareSupply supply;
  JobRunner runner("job-1", spec, Workers(n), &factory, CoordinatorOptions(), &sink, &supply);
  supply.runner = &runner;
  JobOutcome out;
  EXPECT_OK(runner.Run(&out));
  EXPECT_NE(out.param_checksum, 0u);
  return out.param_checksum;
}

// Every step reported once, in order, none a replay.
void ExpectEveryStepOnce(const RecordingSink& sink, int total) {
  ASSERT_EQ(sink.steps.size(), static_cast<size_t>(total));
  for (int i = 0; i < total; ++i) {
    EXPECT_EQ(sink.steps[i].step(), i + 1);
    EXPECT_FALSE(sink.steps[i].replay()) << "step " << i + 1;
  }
}

TEST(JobRunnerReleaseTest, AnElasticJobGoesOnWithoutReleasedWorkersAtAStepBoundary) {
  const v1::JobSpec spec = LongSpec("{min: 1, max: 3}", true);
  const uint64_t undisturbed = Undisturbed(spec, 3);
  FakeClientFactory factory;
  RecordingSink sink;
  SpareSupply supply;
  JobRunner runner("job-1", spec, Workers(3), &factory, CoordinatorOptions(), &sink, &supply);
  supply.runner = &runner;
  sink.on_step = [&](const v1::StepEvent& e) {
    if (e.step() == 3) runner.ReleaseWorkers({"w1", "w9"}, "leaving (SIGTERM)");
  };
  JobOutcome out;
  ASSERT_OK(runner.Run(&out));
  EXPECT_EQ(out.resizes, 1);
  EXPECT_EQ(out.recoveries, 0);
  EXPECT_EQ(out.replayed_steps, 0);
  ExpectEveryStepOnce(sink, 12);
  EXPECT_EQ(out.param_checksum, undisturbed);  // every step applied once, by all that stayed
  ASSERT_EQ(supply.resized.size(), 1u);
  EXPECT_THAT(supply.resized[0], ::testing::MatchesRegex("resized 3 -> 2 workers: worker w1 "
                                                         "leaving \\(SIGTERM\\); continuing "
                                                         "from step [4-9]"));
  EXPECT_THAT(supply.released, ElementsAre(ElementsAre("w1")));
  EXPECT_THAT(supply.resized_lost, ElementsAre(::testing::IsEmpty()));
  EXPECT_TRUE(supply.replaced.empty());
  // w1 was released with the event's reason; the others kept their state.
  EXPECT_THAT(factory.held("fake:1")->Releases(), ElementsAre(supply.resized[0]));
  EXPECT_THAT(factory.held("fake:1")->Kept(), ElementsAre(false));
  for (const char* stays : {"fake:0", "fake:2"}) {
    EXPECT_THAT(factory.held(stays)->Kept(), ElementsAre(false, true)) << stays;
    EXPECT_THAT(factory.held(stays)->Releases(), ElementsAre("job finished")) << stays;
  }
}

TEST(JobRunnerReleaseTest, AJobThatCannotShrinkSnapshotsAtTheBoundaryAndGoesOnOnAReplacement) {
  for (const bool logical : {false, true}) {
    SCOPED_TRACE(logical ? "elastic, at its min" : "not elastic");
    const v1::JobSpec spec = LongSpec(logical ? "{min: 3, max: 3}" : "3", logical);
    const uint64_t undisturbed = Undisturbed(spec, 3);
    FakeClientFactory factory;
    RecordingSink sink;
    std::vector<PoolWorker> replacements = Workers(4);
    replacements.erase(replacements.begin() + 1);  // w0, w2 and the spare w3
    SpareSupply supply(replacements);
    JobRunner runner("job-1", spec, Workers(3), &factory, CoordinatorOptions(), &sink, &supply);
    supply.runner = &runner;
    sink.on_step = [&](const v1::StepEvent& e) {
      if (e.step() == 5) runner.ReleaseWorkers({"w1"}, "leaving (SIGTERM)");
    };
    JobOutcome out;
    ASSERT_OK(runner.Run(&out));  // max_restarts: 0 does not count a planned recovery
    EXPECT_EQ(out.resizes, 0);
    EXPECT_EQ(out.recoveries, 1);
    EXPECT_EQ(out.replayed_steps, 0);  // from the snapshot of the boundary
    ExpectEveryStepOnce(sink, 12);
    EXPECT_EQ(out.param_checksum, undisturbed);
    ASSERT_EQ(supply.replaced.size(), 1u);
    EXPECT_THAT(supply.replaced[0],
                StatusIs(absl::StatusCode::kUnavailable,
                         ::testing::MatchesRegex("worker w1 leaving \\(SIGTERM\\): the job "
                                                 "cannot go on without it .*; it continues from "
                                                 "its snapshot of step [6-9] on replacements")));
    EXPECT_THAT(supply.lost, ElementsAre(::testing::IsEmpty()));  // nobody was lost
    EXPECT_TRUE(supply.resized.empty());
    EXPECT_THAT(factory.held("fake:1")->Releases(),
                ElementsAre(std::string(supply.replaced[0].message())));
    EXPECT_THAT(factory.held("fake:3")->Kept(), ElementsAre(false));  // the snapshot sent
  }
}

// The same losses, accuracies and evaluations, step by step, as `want` (the fakes' replica
// losses depend on the step and the replica only, as real ones do).
void ExpectSameEvents(const RecordingSink& got, const RecordingSink& want) {
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (size_t i = 0; i < got.steps.size(); ++i) {
    EXPECT_EQ(got.steps[i].loss(), want.steps[i].loss()) << "step " << i + 1;
    EXPECT_EQ(got.steps[i].accuracy(), want.steps[i].accuracy()) << "step " << i + 1;
    EXPECT_THAT(got.steps[i].local_losses(),
                ::testing::ElementsAreArray(want.steps[i].local_losses()))
        << "step " << i + 1;
  }
  ASSERT_EQ(got.evals.size(), want.evals.size());
  for (size_t i = 0; i < got.evals.size(); ++i) {
    EXPECT_EQ(got.evals[i].step(), want.evals[i].step());
    EXPECT_EQ(got.evals[i].test_loss(), want.evals[i].test_loss());
  }
}

// A lost worker (w2) finished steps with the others but its answers never came (none from
// step 5 on, then it is dead); `survivors` say how far each of w0 and w1 got.
struct AheadRun {
  JobOutcome out;
  RecordingSink sink;
  SpareSupply supply;
  std::vector<std::vector<bool>> kept;  // w0's and w1's Prepares: keep_state or not
};
void RunWithAnswersLost(const v1::JobSpec& spec, std::vector<FakeWorker> survivors, AheadRun* run) {
  survivors.push_back(FakeWorker{.alive = false, .stall_from = 5});
  FakeClientFactory factory(survivors);
  CoordinatorOptions options;
  options.step_timeout = absl::Milliseconds(300);
  JobRunner runner("job-1", spec, Workers(3), &factory, options, &run->sink, &run->supply);
  run->supply.runner = &runner;
  ASSERT_OK(runner.Run(&run->out));
  for (const char* w : {"fake:0", "fake:1"}) run->kept.push_back(factory.held(w)->Kept());
}

TEST(JobRunnerShrinkTest, StepsTheSurvivorsCompletedWithALostWorkerAreReportedNotReplayed) {
  const v1::JobSpec spec = LongSpec("{min: 1, max: 3}", true);
  RecordingSink undisturbed;
  const uint64_t checksum = Undisturbed(spec, 3, &undisturbed);
  // w0 and w1 go on past step 5 without w2's answers (up to the evaluation's hold at 8).
  AheadRun run;
  RunWithAnswersLost(spec, {FakeWorker{}, FakeWorker{}}, &run);
  EXPECT_EQ(run.out.resizes, 1);
  EXPECT_EQ(run.out.recoveries, 0);
  EXPECT_EQ(run.out.replayed_steps, 0);
  ExpectEveryStepOnce(run.sink, 12);
  ExpectSameEvents(run.sink, undisturbed);
  EXPECT_EQ(run.out.param_checksum, checksum);
  EXPECT_THAT(run.supply.resized_lost, ElementsAre(ElementsAre("w2")));
  EXPECT_THAT(run.supply.resized, ElementsAre(HasSubstr("continuing from step 5")));
  EXPECT_THAT(run.sink.notes, ElementsAre("every survivor had completed steps 6 to 8 with the "
                                          "lost worker, which never answered: reported from "
                                          "the survivors' all-reduce (every replica's loss); "
                                          "continuing from step 8"));
  EXPECT_TRUE(run.supply.replaced.empty());
  EXPECT_THAT(run.kept, ElementsAre(ElementsAre(false, true), ElementsAre(false, true)));
}

TEST(JobRunnerShrinkTest, ASurvivorBehindTheOthersGetsTheStateOfOneThatCompletedTheStep) {
  const v1::JobSpec spec = LongSpec("{min: 1, max: 3}", true);
  RecordingSink undisturbed;
  const uint64_t checksum = Undisturbed(spec, 3, &undisturbed);
  // w0 completed step 6 with the lost w2; w1 did not (its all-reduce of step 6 broke).
  AheadRun run;
  RunWithAnswersLost(spec, {FakeWorker{.stall_from = 6}, FakeWorker{.stall_from = 5}}, &run);
  EXPECT_EQ(run.out.resizes, 1);
  EXPECT_EQ(run.out.recoveries, 0);
  EXPECT_EQ(run.out.replayed_steps, 0);
  ExpectEveryStepOnce(run.sink, 12);
  ExpectSameEvents(run.sink, undisturbed);
  EXPECT_EQ(run.out.param_checksum, checksum);
  EXPECT_THAT(run.sink.notes, ElementsAre(::testing::AllOf(
                                  ::testing::StartsWith("a survivor had completed step 6 with"),
                                  ::testing::EndsWith("step 6 (the others get its state)"))));
  // Each kept its state, then both got w0's (held at step 6) to go on together.
  EXPECT_THAT(run.kept,
              ElementsAre(ElementsAre(false, true, false), ElementsAre(false, true, false)));
}

}  // namespace
}  // namespace lockstep::testing
