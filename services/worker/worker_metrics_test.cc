// Tests of WorkerMetrics: steps by phase, and all-reduces counted through the metered
// collective a JobSlot wraps around its job's collective.
#include "services/worker/worker_metrics.h"

#include "core/queued_collective.h"
#include "core/testing.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

// A collective of `size` ranks that sums nothing and fails when told to; its reductions by
// a function reduce this rank's contributions alone.
class StubCollective final : public Collective {
 public:
  explicit StubCollective(absl::Status answer) : answer_(std::move(answer)) {}
  std::string Name() const override { return "stub"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  absl::Status AllReduceSum(float*, size_t, const CollectiveOptions&) override { return answer_; }
  bool CanAllReduceBy(int total, size_t align) const override { return total == 2; }
  absl::Status AllReduceBy(std::span<const float* const> local, size_t n, float* out,
                           const ChunkReduction& r, const CollectiveOptions&) override {
    if (answer_.ok()) r.reduce(local, n, out);
    return answer_;
  }
  void Abort(const absl::Status& why) override { aborted = why; }
  absl::Status aborted;

 private:
  const absl::Status answer_;
};

class WorkerMetricsTest : public ::testing::Test {
 protected:
  double Value(const std::string& name, const prometheus::Labels& labels = {}) {
    absl::StatusOr<double> v = ReadMetric(metrics_.collectables(), name, labels);
    if (v.ok()) return *v;
    ADD_FAILURE() << "no " << name;
    return -1;
  }
  WorkerMetrics metrics_{std::make_shared<prometheus::Registry>()};
};

TEST_F(WorkerMetricsTest, StepsAreCountedWithTheirPhases) {
  StepResult r;
  r.compute_ms = 10;
  r.allreduce_ms = 5;
  r.update_ms = 2;
  metrics_.OnStep(r);
  metrics_.OnStep(r);
  EXPECT_EQ(Value("lockstep_worker_steps_total"), 2);
  EXPECT_EQ(Value("lockstep_worker_step_phase_seconds_count", {{"phase", "allreduce"}}), 2);
  EXPECT_NEAR(Value("lockstep_worker_step_phase_seconds_sum", {{"phase", "compute"}}), 0.02, 1e-9);
  EXPECT_NEAR(Value("lockstep_worker_step_phase_seconds_sum", {{"phase", "update"}}), 0.004, 1e-9);
}

TEST_F(WorkerMetricsTest, TheMeteredCollectiveCountsBytesOfSuccessfulAllReducesOnly) {
  std::unique_ptr<Collective> ok =
      metrics_.Metered(std::make_unique<StubCollective>(absl::OkStatus()));
  auto* failing_stub = new StubCollective(absl::UnavailableError("peer lost"));
  std::unique_ptr<Collective> failing = metrics_.Metered(std::unique_ptr<Collective>(failing_stub));
  std::vector<float> grads(1000);
  ASSERT_OK(ok->AllReduceSum(grads.data(), grads.size(), {}));
  ASSERT_OK(ok->AllReduceSum(grads.data(), 250, {}));
  EXPECT_THAT(failing->AllReduceSum(grads.data(), grads.size(), {}),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("peer lost")));
  EXPECT_EQ(ok->size(), 2);
  failing->Abort(absl::CancelledError("released"));
  EXPECT_TRUE(absl::IsCancelled(failing_stub->aborted));
  EXPECT_EQ(Value("lockstep_worker_allreduce_bytes_total"), 5000);
  EXPECT_EQ(Value("lockstep_worker_allreduce_seconds_count"), 2);
  EXPECT_EQ(metrics_.Metered(nullptr), nullptr);
}

TEST_F(WorkerMetricsTest, StartedAllReducesAreCountedWhenAWaitCoversThem) {
  std::unique_ptr<Collective> metered = metrics_.Metered(
      std::make_unique<QueuedCollective>(std::make_unique<StubCollective>(absl::OkStatus())));
  std::vector<float> grads(1000);
  ASSERT_OK_AND_ASSIGN(CollectiveTicket first, metered->StartAllReduceSum(grads.data(), 100, {}));
  ASSERT_OK_AND_ASSIGN(CollectiveTicket second,
                       metered->StartAllReduceSum(grads.data() + 100, 900, {}));
  EXPECT_LT(first, second);
  ASSERT_OK(metered->Wait(second));  // covers both
  EXPECT_EQ(Value("lockstep_worker_allreduce_bytes_total"), 4000);
  EXPECT_EQ(Value("lockstep_worker_allreduce_seconds_count"), 2);
  ASSERT_OK(metered->Wait(second));  // counted once
  EXPECT_EQ(Value("lockstep_worker_allreduce_seconds_count"), 2);
}

// The exact sum's reductions pass through (a wrapper that hid them would send the worker's
// exact sums down the slower int64 path: the same bits, at several times the cost).
TEST_F(WorkerMetricsTest, ReductionsByAFunctionPassThroughAndAreCounted) {
  std::unique_ptr<Collective> metered = metrics_.Metered(
      std::make_unique<QueuedCollective>(std::make_unique<StubCollective>(absl::OkStatus())));
  EXPECT_TRUE(metered->CanAllReduceBy(2, 1024));
  EXPECT_FALSE(metered->CanAllReduceBy(3, 1024));
  std::vector<float> a(100, 1.0f), b(100, 2.0f), out(100);
  const ChunkReduction add{2, 1, [](std::span<const float* const> all, size_t n, float* o) {
                             for (size_t i = 0; i < n; ++i) o[i] = all[0][i] + all[1][i];
                           }};
  const std::vector<const float*> local = {a.data(), b.data()};
  ASSERT_OK(metered->AllReduceBy(local, 100, out.data(), add, {}));
  EXPECT_EQ(out[99], 3.0f);
  ASSERT_OK_AND_ASSIGN(CollectiveTicket t,
                       metered->StartAllReduceBy(local, 50, out.data(), add, {}));
  ASSERT_OK(metered->Wait(t));
  EXPECT_EQ(Value("lockstep_worker_allreduce_bytes_total"), 2 * 150 * 4);
  EXPECT_EQ(Value("lockstep_worker_allreduce_seconds_count"), 2);
}

TEST_F(WorkerMetricsTest, HeartbeatsAreCountedByResult) {
  metrics_.OnRegistered();
  metrics_.OnHeartbeat(true);
  metrics_.OnHeartbeat(true);
  metrics_.OnHeartbeat(false);
  EXPECT_EQ(Value("lockstep_worker_registrations_total"), 1);
  EXPECT_EQ(Value("lockstep_worker_heartbeats_total", {{"result", "ok"}}), 2);
  EXPECT_EQ(Value("lockstep_worker_heartbeats_total", {{"result", "error"}}), 1);
}

}  // namespace
}  // namespace lockstep::testing
