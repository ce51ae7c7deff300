// Cancellation at random moments of a job's life, through JobManager over real replicas in
// this process: every cancel ends the job CANCELLED within two seconds, and the workers are
// free again after.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>

#include "absl/synchronization/notification.h"
#include "core/spec/testing.h"
#include "core/testing.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_testing.h"
#include "services/standalone/testing.h"

namespace lockstep::testing {
namespace {

// Counts the moments of a job's life at which a cancel can land (each worker call, each
// step sent and answered) and fires `at(k)` at the k-th, without waiting for it.
class Moments {
 public:
  void Arm(int64_t k, std::function<void()> fire) {
    count_ = 0;
    k_ = k;
    fire_ = std::move(fire);
  }
  void Tick() {
    if (count_.fetch_add(1) == k_) fired_ = std::thread(fire_);
  }
  int64_t count() const { return count_; }
  void Join() {
    if (fired_.joinable()) fired_.join();
  }

 private:
  std::atomic<int64_t> count_{0};
  int64_t k_ = -1;
  std::function<void()> fire_;
  std::thread fired_;
};

class TickingStream final : public StepStream {
 public:
  TickingStream(std::unique_ptr<StepStream> inner, Moments* m) : inner_(std::move(inner)), m_(m) {}
  bool Send(const StepCommand& c) override {
    m_->Tick();
    return inner_->Send(c);
  }
  void CloseSend() override { inner_->CloseSend(); }
  absl::StatusOr<StepResult> Receive(absl::Duration timeout) override {
    auto r = inner_->Receive(timeout);
    m_->Tick();
    return r;
  }
  void Cancel() override { inner_->Cancel(); }

 private:
  std::unique_ptr<StepStream> inner_;
  Moments* m_;
};

class TickingClient final : public WorkerClient {
 public:
  TickingClient(std::unique_ptr<WorkerClient> inner, Moments* m)
      : inner_(std::move(inner)), m_(m) {}
  absl::StatusOr<PrepareResult> Prepare(const JobAssignment& job,
                                        std::shared_ptr<const SharedState> state,
                                        const CancelToken& cancel, absl::Duration t) override {
    m_->Tick();
    return inner_->Prepare(job, std::move(state), cancel, t);
  }
  absl::StatusOr<std::unique_ptr<StepStream>> OpenSteps(const std::string& id,
                                                        const CancelToken& cancel,
                                                        absl::Duration t) override {
    m_->Tick();
    auto s = inner_->OpenSteps(id, cancel, t);
    if (!s.ok()) return s.status();
    return std::unique_ptr<StepStream>(new TickingStream(std::move(s).value(), m_));
  }
  absl::StatusOr<EvalSums> Evaluate(const std::string& id, int64_t b, int64_t e,
                                    const CancelToken& cancel, absl::Duration t) override {
    m_->Tick();
    return inner_->Evaluate(id, b, e, cancel, t);
  }
  absl::StatusOr<TrainState> FetchState(const std::string& id, const CancelToken& cancel,
                                        absl::Duration t) override {
    m_->Tick();
    return inner_->FetchState(id, cancel, t);
  }
  absl::Status Release(const std::string& id, const std::string& why, absl::Duration t) override {
    return inner_->Release(id, why, t);
  }
  bool Alive(absl::Duration t) override { return inner_->Alive(t); }

 private:
  std::unique_ptr<WorkerClient> inner_;
  Moments* m_;
};

class TickingFactory final : public WorkerClientFactory {
 public:
  TickingFactory(WorkerClientFactory* inner, Moments* m) : inner_(inner), m_(m) {}
  std::unique_ptr<WorkerClient> Connect(const std::string& address) override {
    return std::make_unique<TickingClient>(inner_->Connect(address), m_);
  }

 private:
  WorkerClientFactory* inner_;
  Moments* m_;
};

TEST(JobManagerCancel, FiftyRandomMomentsEachEndCancelledWithinTwoSeconds) {
  InProcessWorkers workers(2);
  Moments moments;
  TickingFactory factory(workers.factory(), &moments);
  WorkerPool pool(absl::Hours(1));
  for (const PoolWorker& w : workers.pool_workers()) pool.Register(w.address, "cpu", w.id, 1);
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("cancel");  // so that FetchState is a moment too
  JobManager jobs(options, &pool, nullptr, &factory);
  ASSERT_OK(jobs.Start());

  // An undisturbed run tells how many moments a job has.
  ASSERT_OK_AND_ASSIGN(v1::Job first, jobs.Submit(SmallMlpSpec(2, 12)));
  ASSERT_OK_AND_ASSIGN(v1::Job ended, AwaitEnd(jobs, first.id(), absl::Minutes(1)));
  ASSERT_EQ(ended.state(), v1::SUCCEEDED) << ended.failure_reason();
  const int64_t total = moments.count();
  ASSERT_GT(total, 20);

  std::mt19937 rng(20261130);
  std::vector<double> latencies_ms;
  int too_late = 0;
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t k = std::uniform_int_distribution<int64_t>(0, total - 1)(rng);
    std::string id;
    absl::Notification submitted, cancelled;
    absl::Time cancel_at;
    absl::Status cancel_status;
    moments.Arm(k, [&] {
      submitted.WaitForNotification();
      cancel_at = absl::Now();
      cancel_status = jobs.Cancel(id).status();
      cancelled.Notify();
    });
    ASSERT_OK_AND_ASSIGN(v1::Job job, jobs.Submit(SmallMlpSpec(2, 12)));
    id = job.id();
    submitted.Notify();
    ASSERT_OK_AND_ASSIGN(v1::Job done, AwaitEnd(jobs, id, absl::Minutes(1)));
    const absl::Time end_at = absl::Now();
    if (moments.count() <= k) {
      // The job ended before its k-th moment (a run takes a few more or fewer of them).
      EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
      moments.Arm(-1, nullptr);
      continue;
    }
    cancelled.WaitForNotification();
    moments.Join();
    if (!cancel_status.ok()) {
      EXPECT_EQ(cancel_status.code(), absl::StatusCode::kFailedPrecondition) << cancel_status;
      EXPECT_EQ(done.state(), v1::SUCCEEDED);
      ++too_late;
      continue;
    }
    EXPECT_EQ(done.state(), v1::CANCELLED)
        << "moment " << k << ": " << done.failure_code() << " " << done.failure_reason();
    EXPECT_EQ(done.failure_reason(), "cancelled by the user");
    const absl::Duration latency = end_at - cancel_at;
    EXPECT_LT(latency, absl::Seconds(2)) << "moment " << k;
    latencies_ms.push_back(absl::ToDoubleMilliseconds(latency));
  }
  moments.Join();
  ASSERT_FALSE(latencies_ms.empty());
  std::sort(latencies_ms.begin(), latencies_ms.end());
  std::printf(
      "cancel latency over %zu cancels of running jobs (%d came after the end): "
      "median %.1f ms, max %.1f ms (%lld moments per job)\n",
      latencies_ms.size(), too_late, latencies_ms[latencies_ms.size() / 2], latencies_ms.back(),
      static_cast<long long>(total));
  // The workers are free again: a last job runs to the end.
  ASSERT_OK_AND_ASSIGN(v1::Job last, jobs.Submit(SmallMlpSpec(2, 4)));
  moments.Arm(-1, nullptr);
  ASSERT_OK_AND_ASSIGN(v1::Job last_done, AwaitEnd(jobs, last.id(), absl::Minutes(1)));
  EXPECT_EQ(last_done.state(), v1::SUCCEEDED) << last_done.failure_reason();
  std::filesystem::remove_all(options.checkpoint_dir);
}

}  // namespace
}  // namespace lockstep::testing
