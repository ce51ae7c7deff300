#include "services/coordinator/scheduling/user_limits.h"

#include "core/testing.h"

namespace lockstep::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

UserLimits Defaults() {
  return {
      .max_queued_jobs = 20, .max_running_jobs = 4, .submits_per_minute = 60, .max_jobs_kept = 100};
}

std::map<std::string, Caller> Callers() {
  std::map<std::string, Caller> c;
  c["alice"] = Caller{.admin = false};
  c["bob"] = Caller{.admin = false, .limits = {.max_queued_jobs = 5, .max_jobs_kept = 7}};
  c["root"] = Caller{.admin = true};
  c["ops"] = Caller{.admin = true, .limits = {.submits_per_minute = 10}};
  return c;
}

TEST(UserLimits, UsersTakeTheDefaultsOrTheirOwnAndAdminsAreExemptButForRetention) {
  const UserLimitsTable t(Defaults(), Callers());
  EXPECT_EQ(t.For("alice").max_queued_jobs, 20);
  EXPECT_EQ(t.For("nobody-known").max_queued_jobs, 20);
  const UserLimits& bob = t.For("bob");
  EXPECT_EQ(bob.max_queued_jobs, 5);
  EXPECT_EQ(bob.max_running_jobs, 4);  // unset on his line: the default
  EXPECT_EQ(bob.max_jobs_kept, 7);
  const UserLimits& root = t.For("root");
  EXPECT_EQ(root.max_queued_jobs, 0);
  EXPECT_EQ(root.max_running_jobs, 0);
  EXPECT_EQ(root.submits_per_minute, 0);
  EXPECT_EQ(root.max_jobs_kept, 100);
  const UserLimits& ops = t.For("ops");  // an admin with a limit of their own: limited
  EXPECT_EQ(ops.submits_per_minute, 10);
  EXPECT_EQ(ops.max_queued_jobs, 20);
}

TEST(UserLimits, TextsNameTheUserTheLimitAndWhereItIsSet) {
  const UserLimitsTable t(Defaults(), Callers());
  EXPECT_EQ(OverLimit("alice", t.For("alice"), UserLimit::kQueued, 20),
            "user alice: 20 queued jobs (limit --max_queued_jobs_per_user 20)");
  EXPECT_EQ(OverLimit("bob", t.For("bob"), UserLimit::kQueued, 5),
            "user bob: 5 queued jobs (limit max_queued_jobs=5 in the tokens file)");
  EXPECT_EQ(OverLimit("bob", t.For("bob"), UserLimit::kRunning, 4),
            "user bob: 4 running jobs (limit --max_running_jobs_per_user 4)");
  EXPECT_EQ(LimitSource(t.For("alice"), UserLimit::kSubmitsPerMinute),
            "--submits_per_minute_per_user 60");
}

TEST(UserLimits, CheckRefusesLimitsWithWhichOneUserCouldFillAGlobalCap) {
  EXPECT_OK(UserLimitsTable(Defaults(), Callers()).Check(1000, 10000));
  EXPECT_THAT(
      UserLimitsTable(Defaults(), Callers()).Check(20, 10000),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("--max_queued_jobs_per_user 20"),
                                                         HasSubstr("--max_queued_jobs 20"))));
  UserLimits none = Defaults();
  none.max_queued_jobs = 0;
  EXPECT_THAT(UserLimitsTable(none, {}).Check(1000, 10000),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("between 1 and")));
  std::map<std::string, Caller> greedy = Callers();
  greedy["carol"] = Caller{.admin = false, .limits = {.max_queued_jobs = 1000}};
  EXPECT_THAT(UserLimitsTable(Defaults(), greedy).Check(1000, 10000),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("carol"), HasSubstr("max_queued_jobs=1000"))));
  // Records: an exempt admin may queue up to the global cap, on top of their retention.
  EXPECT_THAT(UserLimitsTable(Defaults(), Callers()).Check(1000, 1100),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("root"), HasSubstr("--max_jobs_kept 1100"))));
  EXPECT_OK(UserLimitsTable(Defaults(), Callers()).Check(1000, 1101));
}

}  // namespace
}  // namespace lockstep::testing
