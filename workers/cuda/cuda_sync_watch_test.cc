// CudaBackend::SetSyncWatch, the hook the NCCL watchdog bounds waits with. A host
// function that sleeps on the stream keeps it busy for a known time, so Synchronize()
// must consult the watch while it waits.
#include <chrono>
#include <thread>

#include "workers/cuda/cuda_backend_impl.h"
#include "workers/cuda/cuda_testing.h"

namespace lockstep {
namespace {

using testing::CudaTest;
using ::testing::HasSubstr;
using testing::StatusIs;

void CUDART_CB Sleep100ms(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }

TEST_F(CudaTest, SynchronizeConsultsTheWatchWhileItWaits) {
  CudaBackend* cuda = CudaBackend::From(cuda_.get());
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(CudaBackend::From(cpu_.get()), nullptr);
  absl::Duration longest = absl::ZeroDuration();
  ASSERT_OK(cuda->SetSyncWatch([&](absl::Duration waited) {
    longest = std::max(longest, waited);
    return absl::OkStatus();
  }));
  EXPECT_THAT(cuda->SetSyncWatch([](absl::Duration) { return absl::OkStatus(); }),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("already")));
  ASSERT_EQ(cudaLaunchHostFunc(cuda->stream(), Sleep100ms, nullptr), cudaSuccess);
  ASSERT_OK(cuda_->Synchronize());
  EXPECT_GE(longest, absl::Milliseconds(50));
  ASSERT_OK(cuda->SetSyncWatch(nullptr));
}

TEST_F(CudaTest, AFailedWatchEndsTheWaitAndPoisonsTheBackend) {
  CudaBackend* cuda = CudaBackend::From(cuda_.get());
  ASSERT_NE(cuda, nullptr);
  ASSERT_OK(cuda->SetSyncWatch([](absl::Duration waited) {
    return waited > absl::Milliseconds(10) ? absl::DeadlineExceededError("peer is stuck")
                                           : absl::OkStatus();
  }));
  ASSERT_EQ(cudaLaunchHostFunc(cuda->stream(), Sleep100ms, nullptr), cudaSuccess);
  const absl::Status st = cuda_->Synchronize();
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("peer is stuck")));
  // The work in flight is unknown: every later wait reports the same error.
  ASSERT_OK(cuda->SetSyncWatch(nullptr));
  EXPECT_EQ(cuda_->Synchronize(), st);
  std::vector<float> host(1);
  Buffer b = ToDevice(std::vector<float>{1.0f});
  EXPECT_EQ(cuda_->CopyToHost(host.data(), b.as(), sizeof(float)), st);
}

}  // namespace
}  // namespace lockstep
