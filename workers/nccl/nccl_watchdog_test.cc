#include "workers/nccl/nccl_watchdog.h"

#include <thread>

#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

// A communicator whose asynchronous error the test sets, and which counts aborts.
class FakeComm final : public AbortableComm {
 public:
  absl::Status AsyncError() override { return async_error; }
  void Abort(const absl::Status& why) override {
    ++aborts;
    reason = why;
  }
  absl::Status async_error;
  int aborts = 0;
  absl::Status reason;
};

TEST(NcclWatchdog, UnarmedWaitsAreUnbounded) {
  FakeComm comm;
  NcclWatchdog watchdog(&comm, "rank 0 of 2");
  EXPECT_TRUE(watchdog.Check(absl::Hours(1)).ok());
  EXPECT_EQ(comm.aborts, 0);
}

TEST(NcclWatchdog, AbortsOnceAWaitOutlastsTheLongestTimeout) {
  FakeComm comm;
  NcclWatchdog watchdog(&comm, "rank 0 of 2");
  watchdog.Arm(absl::Seconds(5));
  watchdog.Arm(absl::Seconds(2));  // the longest armed timeout counts
  EXPECT_TRUE(watchdog.Check(absl::Seconds(4)).ok());
  EXPECT_EQ(comm.aborts, 0);
  const absl::Status st = watchdog.Check(absl::Seconds(6));
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kDeadlineExceeded,
                           HasSubstr("rank 0 of 2: a collective did not finish within 5s")));
  EXPECT_EQ(comm.aborts, 1);
  EXPECT_EQ(comm.reason, st);
  // Sticky, and aborts only once.
  EXPECT_EQ(watchdog.Check(absl::ZeroDuration()), st);
  EXPECT_EQ(comm.aborts, 1);
}

TEST(NcclWatchdog, AsyncErrorAbortsAsUnavailableEvenUnarmed) {
  FakeComm comm;
  NcclWatchdog watchdog(&comm, "rank 1 of 4");
  comm.async_error = absl::UnavailableError("remote process exited");
  EXPECT_THAT(watchdog.Check(absl::Milliseconds(1)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("communicator aborted: remote process exited")));
  EXPECT_EQ(comm.aborts, 1);
}

TEST(NcclWatchdog, AnAbortRequestedFromAnotherThreadAbortsAtTheNextCheck) {
  FakeComm comm;
  NcclWatchdog watchdog(&comm, "rank 0 of 2");
  watchdog.Arm(absl::Seconds(30));
  std::thread other([&] { watchdog.RequestAbort(absl::CancelledError("job released")); });
  other.join();
  EXPECT_EQ(comm.aborts, 0);  // only the driving thread touches the communicator
  EXPECT_THAT(watchdog.Check(absl::Milliseconds(1)),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("job released")));
  EXPECT_EQ(comm.aborts, 1);
}

}  // namespace
}  // namespace lockstep
