#include "core/queued_collective.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records the sizes it is called with and the thread; optionally blocks each call until
// released, fails calls of a given size, and counts concurrent calls.
class FakeCollective final : public Collective {
 public:
  std::string Name() const override { return "fake"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  absl::Status AllReduceSum(float* data, size_t n, const CollectiveOptions&) override {
    {
      absl::MutexLock lock(&mu_);
      if (!abort_.ok() && released_) {  // aborted while not in flight: fail at once
        return absl::FailedPreconditionError(absl::StrCat("unusable: ", abort_.message()));
      }
    }
    const int now = ++inside_;
    {
      absl::MutexLock lock(&mu_);
      max_inside_ = std::max(max_inside_, now);
      calls_.push_back(n);
      threads_.push_back(std::this_thread::get_id());
      entered_.SignalAll();
      while (hold_ && !released_) released_cv_.Wait(&mu_);
    }
    for (size_t i = 0; i < n; ++i) data[i] *= 2;
    --inside_;
    if (n == fail_size_) return absl::UnavailableError("peer lost");
    return absl::OkStatus();
  }
  // Recorded as 1000 + n (sum) or 2000 + n (max); adds 1, or raises to at least 7.
  absl::Status AllReduceInt64(int64_t* data, size_t n, ReduceOp op,
                              const CollectiveOptions&) override {
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back((op == ReduceOp::kSum ? 1000 : 2000) + n);
      threads_.push_back(std::this_thread::get_id());
      entered_.SignalAll();
    }
    for (size_t i = 0; i < n; ++i)
      data[i] = op == ReduceOp::kSum ? data[i] + 1 : std::max<int64_t>(data[i], 7);
    return absl::OkStatus();
  }
  // Recorded as 3000 + n; reduces this rank's contributions alone.
  bool CanAllReduceBy(int total, size_t align) const override { return true; }
  absl::Status AllReduceBy(std::span<const float* const> local, size_t n, float* out,
                           const ChunkReduction& r, const CollectiveOptions&) override {
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back(3000 + n);
      threads_.push_back(std::this_thread::get_id());
      entered_.SignalAll();
    }
    r.reduce(local, n, out);
    return absl::OkStatus();
  }
  void Abort(const absl::Status& why) override {
    absl::MutexLock lock(&mu_);
    abort_ = why;
  }
  void Hold() {
    absl::MutexLock lock(&mu_);
    hold_ = true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    released_ = true;
    released_cv_.SignalAll();
  }
  void AwaitCalls(size_t k) {
    absl::MutexLock lock(&mu_);
    while (calls_.size() < k) entered_.Wait(&mu_);
  }
  std::vector<size_t> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  std::vector<std::thread::id> threads() {
    absl::MutexLock lock(&mu_);
    return threads_;
  }
  absl::Status abort() {
    absl::MutexLock lock(&mu_);
    return abort_;
  }
  int max_inside() {
    absl::MutexLock lock(&mu_);
    return max_inside_;
  }
  size_t fail_size_ = SIZE_MAX;

 private:
  std::atomic<int> inside_{0};
  absl::Mutex mu_;
  absl::CondVar entered_, released_cv_;
  bool hold_ = false, released_ = false;
  int max_inside_ = 0;
  std::vector<size_t> calls_;
  std::vector<std::thread::id> threads_;
  absl::Status abort_;
};

struct Fixture {
  FakeCollective* fake = new FakeCollective;
  QueuedCollective queued{std::unique_ptr<Collective>(fake)};
};

TEST(QueuedCollective, SynchronousRunsOnTheCallersThreadWhenIdle) {
  Fixture f;
  std::vector<float> x = {1, 2};
  ASSERT_OK(f.queued.AllReduceSum(x.data(), 2, {}));
  EXPECT_THAT(x, ElementsAre(2, 4));
  EXPECT_THAT(f.fake->threads(), ElementsAre(std::this_thread::get_id()));
  EXPECT_EQ(f.queued.Name(), "fake");
  EXPECT_EQ(f.queued.size(), 2);
}

TEST(QueuedCollective, StartReturnsBeforeTheAllReduceEndsAndRunsInOrder) {
  Fixture f;
  f.fake->Hold();
  std::vector<float> a(1, 1), b(2, 1), c(3, 1);
  ASSERT_OK_AND_ASSIGN(CollectiveTicket ta, f.queued.StartAllReduceSum(a.data(), 1, {}));
  ASSERT_OK_AND_ASSIGN(CollectiveTicket tb, f.queued.StartAllReduceSum(b.data(), 2, {}));
  EXPECT_LT(ta, tb);
  f.fake->AwaitCalls(1);  // the first is in the inner collective, held there
  // A synchronous all-reduce queues behind the started ones.
  absl::Notification sync_done;
  std::thread sync([&] {
    EXPECT_OK(f.queued.AllReduceSum(c.data(), 3, {}));
    sync_done.Notify();
  });
  // Once it has queued (ticket 3), it stays there while the first is held.
  EXPECT_TRUE(f.queued.AwaitIssued(tb + 1, absl::Seconds(30)));
  EXPECT_FALSE(sync_done.HasBeenNotified());
  EXPECT_THAT(f.fake->calls(), ElementsAre(1));
  f.fake->Release();
  ASSERT_OK(f.queued.Wait(tb));
  sync.join();
  EXPECT_THAT(f.fake->calls(), ElementsAre(1, 2, 3));
  EXPECT_EQ(f.fake->max_inside(), 1);  // never two at once
  EXPECT_NE(f.fake->threads()[0], std::this_thread::get_id());
  EXPECT_THAT(b, ElementsAre(2, 2));
  EXPECT_THAT(c, ElementsAre(2, 2, 2));
}

// The integer reductions go through the same FIFO: behind a started float all-reduce.
TEST(QueuedCollective, IntegerReductionsQueueBehindStartedOnes) {
  Fixture f;
  f.fake->Hold();
  std::vector<float> a(1, 1);
  std::vector<int64_t> sums = {1, 2}, maxima = {3, 9, 5};
  ASSERT_OK_AND_ASSIGN(CollectiveTicket ta, f.queued.StartAllReduceSum(a.data(), 1, {}));
  f.fake->AwaitCalls(1);
  absl::Notification done;
  std::thread sync([&] {
    EXPECT_OK(f.queued.AllReduceInt64(sums.data(), 2, ReduceOp::kSum, {}));
    EXPECT_OK(f.queued.AllReduceInt64(maxima.data(), 3, ReduceOp::kMax, {}));
    done.Notify();
  });
  EXPECT_TRUE(f.queued.AwaitIssued(ta + 1, absl::Seconds(30)));
  EXPECT_FALSE(done.HasBeenNotified());
  EXPECT_THAT(f.fake->calls(), ElementsAre(1));
  f.fake->Release();
  sync.join();
  ASSERT_OK(f.queued.Wait(ta));
  EXPECT_THAT(f.fake->calls(), ElementsAre(1, 1002, 2003));
  EXPECT_THAT(sums, ElementsAre(2, 3));
  EXPECT_THAT(maxima, ElementsAre(7, 9, 7));
}

// Reductions by a function go through the same FIFO, started or synchronous; a started
// one keeps its contributions (the caller's vector of pointers may go) until it runs.
TEST(QueuedCollective, ReductionsByAFunctionStartAndQueueInOrder) {
  Fixture f;
  EXPECT_TRUE(f.queued.CanAllReduceBy(2, 1024));
  f.fake->Hold();
  std::vector<float> a(1, 1), x = {1, 2}, y = {10, 20}, out(2), sync_out(2);
  const ChunkReduction add{2, 1, [](std::span<const float* const> all, size_t n, float* o) {
                             for (size_t i = 0; i < n; ++i) o[i] = all[0][i] + all[1][i];
                           }};
  ASSERT_OK_AND_ASSIGN(CollectiveTicket ta, f.queued.StartAllReduceSum(a.data(), 1, {}));
  f.fake->AwaitCalls(1);
  CollectiveTicket tb;
  {
    const std::vector<const float*> local = {x.data(), y.data()};
    ASSERT_OK_AND_ASSIGN(tb, f.queued.StartAllReduceBy(local, 2, out.data(), add, {}));
  }
  EXPECT_EQ(tb, ta + 1);
  absl::Notification done;
  std::thread sync([&] {
    const std::vector<const float*> local = {y.data(), y.data()};
    EXPECT_OK(f.queued.AllReduceBy(local, 2, sync_out.data(), add, {}));
    done.Notify();
  });
  EXPECT_TRUE(f.queued.AwaitIssued(tb + 1, absl::Seconds(30)));
  EXPECT_FALSE(done.HasBeenNotified());
  EXPECT_THAT(out, ElementsAre(0, 0));
  f.fake->Release();
  sync.join();
  ASSERT_OK(f.queued.Wait(tb));
  EXPECT_THAT(f.fake->calls(), ElementsAre(1, 3002, 3002));
  EXPECT_THAT(out, ElementsAre(11, 22));
  EXPECT_THAT(sync_out, ElementsAre(20, 40));
}

TEST(QueuedCollective, WaitReturnsEachFailureOnce) {
  Fixture f;
  f.fake->fail_size_ = 2;
  std::vector<float> x(3, 1);
  ASSERT_OK_AND_ASSIGN(CollectiveTicket t1, f.queued.StartAllReduceSum(x.data(), 1, {}));
  ASSERT_OK_AND_ASSIGN(CollectiveTicket t2, f.queued.StartAllReduceSum(x.data(), 2, {}));
  ASSERT_OK_AND_ASSIGN(CollectiveTicket t3, f.queued.StartAllReduceSum(x.data(), 3, {}));
  EXPECT_OK(f.queued.Wait(t1));
  // Waiting for the third covers the second's failure.
  EXPECT_THAT(f.queued.Wait(t3), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("peer lost")));
  EXPECT_OK(f.queued.Wait(t2));  // already returned
  EXPECT_OK(f.queued.Wait(0));
  EXPECT_THAT(f.queued.Wait(t3 + 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("never issued")));
}

TEST(QueuedCollective, AbortIsTheInnerCollectives) {
  Fixture f;
  f.fake->Hold();
  std::vector<float> x(3, 1);
  ASSERT_OK_AND_ASSIGN(CollectiveTicket t1, f.queued.StartAllReduceSum(x.data(), 1, {}));
  ASSERT_OK_AND_ASSIGN(CollectiveTicket t2, f.queued.StartAllReduceSum(x.data(), 2, {}));
  f.fake->AwaitCalls(1);
  f.queued.Abort(absl::CancelledError("job cancelled"));
  EXPECT_THAT(f.fake->abort(), StatusIs(absl::StatusCode::kCancelled, "job cancelled"));
  f.fake->Release();  // the inner collective's in-flight call ends (here: succeeds)
  EXPECT_OK(f.queued.Wait(t1));
  // The queued one reaches the aborted inner collective, which fails it at once.
  EXPECT_THAT(f.queued.Wait(t2),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("job cancelled")));
  EXPECT_THAT(f.queued.AllReduceSum(x.data(), 3, {}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("job cancelled")));
  EXPECT_THAT(f.fake->calls(), ElementsAre(1));
}

TEST(QueuedCollective, AWaitOnAnAllReduceThatOverrunsItsTimeoutEndsDeadlineExceeded) {
  Fixture f;
  f.fake->Hold();  // the inner collective overruns the timeout it was given
  std::vector<float> a(1, 1), b(2, 1);
  const CollectiveOptions brief{.timeout = absl::Milliseconds(10)};
  ASSERT_OK_AND_ASSIGN(CollectiveTicket ta, f.queued.StartAllReduceSum(a.data(), 1, brief));
  ASSERT_OK_AND_ASSIGN(CollectiveTicket tb, f.queued.StartAllReduceSum(b.data(), 2, brief));
  f.fake->AwaitCalls(1);
  EXPECT_THAT(f.queued.Wait(tb),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("fake: all-reduce 2 did not end within 1.02s")));
  f.fake->Release();  // it ends after all; so does what was queued behind it
  EXPECT_OK(f.queued.Wait(ta));
}

TEST(QueuedCollective, DestructionFinishesWhatIsQueued) {
  std::vector<float> x(2, 1);
  auto* fake = new FakeCollective;
  {
    QueuedCollective queued{std::unique_ptr<Collective>(fake)};
    ASSERT_OK(queued.StartAllReduceSum(x.data(), 1, {}).status());
    ASSERT_OK(queued.StartAllReduceSum(x.data() + 1, 1, {}).status());
  }
  EXPECT_THAT(x, ElementsAre(2, 2));
}

}  // namespace
}  // namespace lockstep
