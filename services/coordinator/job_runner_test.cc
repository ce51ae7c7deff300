#include "services/coordinator/job_runner.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "core/spec/testing.h"
#include "core/testing.h"
#include "services/coordinator/fake_worker_client.h"

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
  void OnStep(const v1::StepEvent& e) override { steps.push_back(e); }
  void OnEval(const v1::EvalResult& r) override { evals.push_back(r); }
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
  const absl::Time t0 = absl::Now();
  std::thread run([&] {
    JobOutcome out;
    st = runner.Run(&out);
  });
  for (FakeClient* c : factory.clients) c->AwaitPrepare();
  runner.Abort(absl::CancelledError("cancelled by the user"));
  run.join();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));  // not the minute a hung Prepare lasts
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kCancelled, "cancelled by the user"));
  EXPECT_TRUE(sink.steps.empty());
  for (FakeClient* c : factory.clients) {
    EXPECT_THAT(c->releases(), ElementsAre("cancelled by the user"));
  }
}

}  // namespace
}  // namespace lockstep::testing
