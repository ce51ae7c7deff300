#include "services/coordinator/workers/enrolled_workers.h"

#include <filesystem>

#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::ScratchDir;
using testing::StatusIs;

// Auto-approval covers names matching the glob up to its count, over restarts; the rest
// wait for an admin.
TEST(EnrolledWorkers, AutoApprovalIsLimitedToAPatternAndACountTheRestWait) {
  const ScratchDir dir("enrolled-workers");
  const std::string file = (dir.path() / "enrolled-workers").string();
  const ApprovalPolicy policy{"lockstep-worker-*", 2};
  {
    ASSERT_OK_AND_ASSIGN(EnrolledWorkers e, EnrolledWorkers::Load(file));
    ASSERT_OK_AND_ASSIGN(auto a,
                         e.Add("lockstep-worker-0-0000000000000001", "lockstep-worker-0", policy));
    EXPECT_EQ(a.status, EnrolledWorkers::Status::kAuto);
    ASSERT_OK_AND_ASSIGN(auto rogue, e.Add("laptop-0000000000000002", "laptop", policy));
    EXPECT_EQ(rogue.status, EnrolledWorkers::Status::kPending);
    EXPECT_TRUE(e.Pending("laptop-0000000000000002"));
    ASSERT_OK(e.Add("lockstep-worker-1-0000000000000003", "lockstep-worker-1", policy).status());
  }
  ASSERT_OK_AND_ASSIGN(EnrolledWorkers e, EnrolledWorkers::Load(file));
  // The count (2) is spent, also after a restart: the third matching name waits.
  ASSERT_OK_AND_ASSIGN(auto third,
                       e.Add("lockstep-worker-2-0000000000000004", "lockstep-worker-2", policy));
  EXPECT_EQ(third.status, EnrolledWorkers::Status::kPending);
  EXPECT_TRUE(e.Pending("laptop-0000000000000002"));
  ASSERT_OK(e.Approve("laptop-0000000000000002"));
  EXPECT_FALSE(e.Pending("laptop-0000000000000002"));
  EXPECT_FALSE(e.Pending("worker-7"));  // the operator's, not enrolled: nothing to approve
  EXPECT_THAT(e.Approve("worker-7"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("worker-7")));
  EXPECT_EQ(e.entries().size(), 4u);
  EXPECT_EQ(std::filesystem::status(file).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

TEST(EnrolledWorkers, AMalformedFileIsInvalidArgumentNamingTheLine) {
  const ScratchDir dir("enrolled-workers");
  const std::string file = dir.Write("enrolled-workers", "a-1 approved a\nb-2 maybe b\n");
  EXPECT_THAT(EnrolledWorkers::Load(file),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(file + ":2")));
}

}  // namespace
}  // namespace lockstep
