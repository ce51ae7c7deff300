// Gradient buckets overlapping backward (StepExecutor::set_allreduce_bucket_bytes) with
// a real GlooCollective over loopback: N in-process replicas of the CNN, one thread each.
// 2 replicas end bitwise where one all-reduce after backward ends them; more are
// deterministic run to run; a peer that never steps, or an abort, fails a bucketed step
// promptly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/data/random_dataset.h"
#include "core/optimizer_spec.h"
#include "core/step.h"
#include "core/store.h"
#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"
#include "workers/gloo/gloo_collective.h"

namespace lockstep {
namespace {

using ::lockstep::testing::RelativeL2;
using ::lockstep::testing::StatusIs;
using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr int kGlobalBatch = 48;
constexpr int kSteps = 3;

const Dataset& Data() {
  static const Dataset* d = new Dataset(RandomDataset(kGlobalBatch * kSteps, 7));
  return *d;
}

Optimizer Adam() {
  v1::OptimizerSpec spec;
  spec.set_kind("adam");
  spec.set_learning_rate(1e-3);
  return *OptimizerFromSpec(spec);
}

std::unique_ptr<Collective> Join(Store* store, int rank, int size, const std::string& prefix) {
  GlooOptions options;
  options.hostname = "127.0.0.1";
  options.prefix = prefix;
  options.connect_timeout = absl::Seconds(20);
  auto c = GlooCollective::Create(rank, size, store, options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// Trains `size` replicas kSteps steps with the given bucket size; each rank's final params.
std::vector<std::vector<float>> Train(int size, size_t bucket_bytes) {
  static MemoryStore store;
  static std::atomic<int> run{0};
  const std::string prefix = absl::StrCat("overlap", run++);
  std::vector<std::vector<float>> params(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Collective> collective = Join(&store, r, size, prefix);
      if (collective == nullptr) return;
      std::unique_ptr<Backend> backend = NewCpuBackend(1);
      const Model model = Model::Cnn();
      const Optimizer opt = Adam();
      const int local = kGlobalBatch / size;
      auto exec = StepExecutor::Create(model, opt, rng::Impl::kPartitionable, local, backend.get(),
                                       collective.get());
      ASSERT_OK(exec);
      (*exec)->set_allreduce_bucket_bytes(bucket_bytes);
      ASSERT_OK((*exec)->SetState(
          TrainState::Create(model.Init(rng::Key{0, 0}, rng::Impl::kPartitionable), opt)));
      auto data = (*exec)->Upload(Data());
      ASSERT_OK(data);
      std::vector<int32_t> idx(local);
      for (int s = 0; s < kSteps; ++s) {
        for (int i = 0; i < local; ++i) idx[i] = s * kGlobalBatch + r * local + i;
        ASSERT_OK((*exec)->Step(*data, idx, rng::Key{0, static_cast<uint32_t>(s)}));
      }
      auto state = (*exec)->GetState();
      ASSERT_OK(state);
      params[r] = state->params;
    });
  }
  for (std::thread& t : threads) t.join();
  return params;
}

TEST(GlooOverlapStep, TwoReplicasBucketedAreBitwiseTheUnbucketed) {
  const auto plain = Train(2, 0);
  ASSERT_FALSE(plain[0].empty());
  EXPECT_EQ(plain[0], plain[1]);
  EXPECT_NE(plain[0], Model::Cnn().Init(rng::Key{0, 0}, rng::Impl::kPartitionable));  // trained
  for (size_t bucket : {size_t{1}, size_t{64} << 10, size_t{1} << 20}) {
    const auto bucketed = Train(2, bucket);
    EXPECT_EQ(bucketed[0], plain[0]) << "bucket " << bucket;
    EXPECT_EQ(bucketed[1], plain[0]) << "bucket " << bucket;
  }
}

TEST(GlooOverlapStep, ThreeReplicasAreDeterministicAndAgreeClosely) {
  const auto a = Train(3, 1);
  const auto b = Train(3, 1);
  ASSERT_FALSE(a[0].empty());
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(a[r], a[0]) << "rank " << r;  // replicas agree
    EXPECT_EQ(b[r], a[0]) << "rank " << r;  // and runs do
  }
  const auto plain = Train(3, 0);
  EXPECT_LE(RelativeL2(a[0], plain[0]), 1e-5);
}

// The collective a step runs on, which tells when the step first waits for its started
// buckets (Wait), so that a test can act while the step is blocked there.
class WaitSignal final : public Collective {
 public:
  explicit WaitSignal(Collective* inner) : inner_(inner) {}
  std::string Name() const override { return inner_->Name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  absl::Status AllReduceSum(float* data, size_t n, const CollectiveOptions& options) override {
    return inner_->AllReduceSum(data, n, options);
  }
  absl::StatusOr<CollectiveTicket> StartAllReduceSum(float* data, size_t n,
                                                     const CollectiveOptions& options) override {
    return inner_->StartAllReduceSum(data, n, options);
  }
  absl::Status Wait(CollectiveTicket ticket) override {
    if (!waiting_.HasBeenNotified()) waiting_.Notify();
    return inner_->Wait(ticket);
  }
  void Abort(const absl::Status& why) override { inner_->Abort(why); }
  // Whether a Wait began within `timeout`.
  bool AwaitWait(absl::Duration timeout) {
    return waiting_.WaitForNotificationWithTimeout(timeout);
  }

 private:
  Collective* const inner_;
  absl::Notification waiting_;
};

// Rank 0 steps with buckets; rank 1 joins the mesh but never steps.
class LonelyStep : public ::testing::Test {
 protected:
  void SetUp() override {
    std::thread peer([&] { peer_ = Join(&store_, 1, 2, "lonely"); });
    self_ = Join(&store_, 0, 2, "lonely");
    peer.join();
    ASSERT_NE(self_, nullptr);
    ASSERT_NE(peer_, nullptr);
    signal_ = std::make_unique<WaitSignal>(self_.get());
    backend_ = NewCpuBackend(1);
    auto exec = StepExecutor::Create(Model::Cnn(), Adam(), rng::Impl::kPartitionable,
                                     kGlobalBatch / 2, backend_.get(), signal_.get());
    ASSERT_OK(exec);
    exec_ = *std::move(exec);
    exec_->set_allreduce_bucket_bytes(1);
    auto data = exec_->Upload(Data());
    ASSERT_OK(data);
    data_ = *std::move(data);
    idx_.resize(kGlobalBatch / 2);
    for (size_t i = 0; i < idx_.size(); ++i) idx_[i] = static_cast<int32_t>(i);
  }
  MemoryStore store_;
  std::unique_ptr<Collective> self_, peer_;
  std::unique_ptr<WaitSignal> signal_;  // over self_: what the step runs on
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<StepExecutor> exec_;
  DeviceDataset data_;
  std::vector<int32_t> idx_;
};

TEST_F(LonelyStep, TimesOutWithinTheCollectiveTimeout) {
  exec_->set_collective_timeout(absl::Milliseconds(500));
  auto step = exec_->Step(data_, idx_, rng::Key{0, 0});
  // The bound that fired is the collective timeout the test set (the error names it).
  EXPECT_THAT(step, StatusIs(absl::StatusCode::kDeadlineExceeded,
                             HasSubstr("(CollectiveOptions.timeout 500ms)")));
}

TEST_F(LonelyStep, AbortEndsTheStepPromptly) {
  exec_->set_collective_timeout(absl::Seconds(60));
  std::thread abort([&] {
    // Once the step waits for its buckets (the peer never sends its part).
    EXPECT_TRUE(signal_->AwaitWait(absl::Seconds(30)));
    const absl::Status why = absl::CancelledError("job cancelled");
    self_->Abort(why);
    peer_->Abort(why);  // as the coordinator's cancel reaches every worker
  });
  auto step = exec_->Step(data_, idx_, rng::Key{0, 0});
  abort.join();
  // The abort's error: ABORTED for the bucket in flight, FAILED_PRECONDITION had none yet
  // reached the collective; never the 60 s timeout's, naming its reason.
  EXPECT_THAT(step.status().code(),
              AnyOf(absl::StatusCode::kAborted, absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(step.status().message(), HasSubstr("job cancelled"));
}

}  // namespace
}  // namespace lockstep
