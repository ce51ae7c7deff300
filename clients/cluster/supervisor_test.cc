#include "clients/cluster/supervisor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <map>

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(RestartBackoffTest, DoublesUpToTheMaximum) {
  RestartBackoff b({absl::Seconds(1), absl::Seconds(30), absl::Seconds(60)});
  std::vector<absl::Duration> delays;
  for (int i = 0; i < 7; ++i) delays.push_back(b.NextDelay(absl::Seconds(2)));
  EXPECT_THAT(delays,
              ElementsAre(absl::Seconds(1), absl::Seconds(2), absl::Seconds(4), absl::Seconds(8),
                          absl::Seconds(16), absl::Seconds(30), absl::Seconds(30)));
}

TEST(RestartBackoffTest, ResetsAfterAServerStayedUp) {
  RestartBackoff b({absl::Seconds(1), absl::Seconds(30), absl::Seconds(60)});
  for (int i = 0; i < 4; ++i) b.NextDelay(absl::ZeroDuration());  // 1, 2, 4, 8
  EXPECT_EQ(b.NextDelay(absl::Seconds(59)), absl::Seconds(16));
  EXPECT_EQ(b.NextDelay(absl::Seconds(60)), absl::Seconds(1));
  EXPECT_EQ(b.NextDelay(absl::Seconds(1)), absl::Seconds(2));
}

TEST(DescribeWaitStatusTest, ExitCodesAndSignals) {
  EXPECT_EQ(DescribeWaitStatus(3 << 8), "exited with status 3");  // as WEXITSTATUS reads it
  EXPECT_THAT(DescribeWaitStatus(SIGKILL), HasSubstr("killed by signal 9"));
}

// Servers as a table: a test makes one exit by setting its status.
class FakeServers : public SupervisedServers {
 public:
  explicit FakeServers(int n) : exited_(n), starts_(n, 1) {}
  int ServerCount() const override { return static_cast<int>(exited_.size()); }
  std::string ServerName(int i) const override { return "server-" + std::to_string(i); }
  std::optional<int> Reap(int i) override { return std::exchange(exited_[i], std::nullopt); }
  absl::Status Respawn(int i) override {
    if (fail_next_) {
      fail_next_ = false;
      return absl::InternalError("fork failed");
    }
    ++starts_[i];
    if (crash_on_start_) exited_[i] = 1 << 8;  // exits with status 1 at once
    return absl::OkStatus();
  }

  std::vector<std::optional<int>> exited_;
  std::vector<int> starts_;  // per server, the first start included
  bool fail_next_ = false;
  bool crash_on_start_ = false;
};

class SupervisorTest : public ::testing::Test {
 protected:
  SupervisorTest()
      : servers_(3),
        supervisor_(&servers_, t0_, {absl::Seconds(1), absl::Seconds(30), absl::Seconds(60)},
                    [this](const std::string& line) { log_.push_back(line); }) {}

  // Polls every 200 ms (as `cluster up` does) from `from` to `to`; returns how many polls
  // restarted something.
  int PollUntil(absl::Duration from, absl::Duration to) {
    int restarts = 0;
    for (absl::Duration t = from; t <= to; t += absl::Milliseconds(200)) {
      restarts += supervisor_.Poll(t0_ + t);
    }
    return restarts;
  }

  const absl::Time t0_ = absl::FromUnixSeconds(1'700'000'000);
  FakeServers servers_;
  std::vector<std::string> log_;
  Supervisor supervisor_;
};

TEST_F(SupervisorTest, LeavesRunningServersAlone) {
  EXPECT_EQ(PollUntil(absl::ZeroDuration(), absl::Seconds(5)), 0);
  EXPECT_THAT(servers_.starts_, ElementsAre(1, 1, 1));
  EXPECT_THAT(log_, IsEmpty());
}

TEST_F(SupervisorTest, RestartsAnExitedServerAfterTheDelayAndSaysWhy) {
  servers_.exited_[1] = SIGKILL;
  supervisor_.Poll(t0_ + absl::Seconds(10));
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_THAT(log_[0], HasSubstr("server-1 killed by signal 9"));
  EXPECT_THAT(log_[0], HasSubstr("after 10.0s up"));
  EXPECT_THAT(log_[0], HasSubstr("restarting it in 1s"));
  EXPECT_EQ(PollUntil(absl::Seconds(10), absl::Milliseconds(10800)), 0);  // not before 1 s
  EXPECT_EQ(servers_.starts_[1], 1);
  EXPECT_EQ(PollUntil(absl::Seconds(11), absl::Seconds(12)), 1);
  EXPECT_THAT(servers_.starts_, ElementsAre(1, 2, 1));  // only the one that exited
}

TEST_F(SupervisorTest, BacksOffWhileAServerKeepsCrashingAndResetsOnceItStaysUp) {
  // Every start crashes at once, and each crash is seen at the next poll, 100 ms on:
  // restarts 1, 2, 4 and 8 s after the crashes.
  servers_.exited_[0] = SIGKILL;
  servers_.crash_on_start_ = true;
  std::vector<absl::Duration> restarted_at;
  for (absl::Duration t; t < absl::Seconds(20); t += absl::Milliseconds(100)) {
    if (supervisor_.Poll(t0_ + t)) restarted_at.push_back(t);
  }
  EXPECT_THAT(restarted_at, ElementsAre(absl::Seconds(1), absl::Milliseconds(3100),
                                        absl::Milliseconds(7200), absl::Milliseconds(15300)));
  EXPECT_THAT(log_.back(), HasSubstr("server-0 exited with status 1 after 0.1s up"));
  EXPECT_THAT(log_.back(), HasSubstr("restarting it in 16s"));
  // The start at 31.4 s stays up, for 60 s and more: its next crash waits 1 s again.
  servers_.crash_on_start_ = false;
  EXPECT_EQ(PollUntil(absl::Seconds(20), absl::Seconds(32)), 1);
  EXPECT_EQ(PollUntil(absl::Seconds(32), absl::Seconds(100)), 0);
  servers_.exited_[0] = SIGSEGV;
  supervisor_.Poll(t0_ + absl::Seconds(100));
  EXPECT_THAT(log_.back(), HasSubstr("restarting it in 1s"));
}

TEST_F(SupervisorTest, RetriesAFailedStartWithBackoff) {
  servers_.exited_[2] = SIGKILL;
  servers_.fail_next_ = true;
  EXPECT_EQ(PollUntil(absl::ZeroDuration(), absl::Seconds(2)), 0);  // the start at 1 s fails
  EXPECT_THAT(log_.back(), HasSubstr("server-2 did not start: INTERNAL: fork failed"));
  EXPECT_THAT(log_.back(), HasSubstr("restarting it in 2s"));
  EXPECT_EQ(PollUntil(absl::Seconds(2), absl::Seconds(3)), 1);  // at 3 s
  EXPECT_EQ(servers_.starts_[2], 2);
}

TEST(SupervisorGrowthTest, WatchesServersAddedLater) {
  FakeServers servers(1);
  std::vector<std::string> log;
  const absl::Time t0 = absl::UnixEpoch();
  Supervisor supervisor(&servers, t0, {}, [&](const std::string& line) { log.push_back(line); });
  servers.exited_.push_back(SIGKILL);
  servers.starts_.push_back(1);
  supervisor.Poll(t0 + absl::Seconds(5));
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0], HasSubstr("server-1 killed by signal 9 (Killed) after 0.0s up"));
  EXPECT_TRUE(supervisor.Poll(t0 + absl::Seconds(6)));
  EXPECT_EQ(servers.starts_[1], 2);
}

// `cluster up --restart never`: a server that exits stays gone, and says so once.
TEST(SupervisorNeverTest, LeavesAnExitedServerGoneAndLogsItOnce) {
  FakeServers servers(3);
  std::vector<std::string> log;
  const absl::Time t0 = absl::UnixEpoch();
  Supervisor supervisor(
      &servers, t0, {}, [&](const std::string& line) { log.push_back(line); },
      RestartPolicy::kNever);
  servers.exited_[2] = SIGKILL;
  EXPECT_TRUE(supervisor.Poll(t0 + absl::Seconds(3)));  // its pid changed: reaped
  for (absl::Duration t = absl::Seconds(3); t < absl::Seconds(120); t += absl::Seconds(1)) {
    EXPECT_FALSE(supervisor.Poll(t0 + t));
  }
  EXPECT_THAT(servers.starts_, ElementsAre(1, 1, 1));
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0], HasSubstr("server-2 killed by signal 9"));
  EXPECT_THAT(log[0], HasSubstr("not restarted (--restart never)"));
}

}  // namespace
}  // namespace lockstep
