#include "services/common/folder_lock.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

class FolderLockTest : public ::testing::Test {
 protected:
  FolderLockTest() {
    std::string templ = "/tmp/folder_lock_test.XXXXXX";
    EXPECT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  ~FolderLockTest() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(FolderLockTest, ASecondHolderIsRefusedNamingTheFirstsPid) {
  ASSERT_OK_AND_ASSIGN(auto first, FolderLock::Acquire("--state_dir", dir_));
  EXPECT_THAT(FolderLock::Acquire("--state_dir", dir_),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::AllOf(HasSubstr("--state_dir " + dir_),
                                        HasSubstr(absl::StrCat("pid ", getpid(), " on ")))));
  // Another process too (flock is per open file, and a child's is its own).
  const pid_t child = fork();
  if (child == 0) _exit(FolderLock::Acquire("--state_dir", dir_).ok() ? 0 : 3);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(WEXITSTATUS(status), 3);
  // Released with its holder: the next one takes it.
  first.reset();
  EXPECT_OK(FolderLock::Acquire("--state_dir", dir_));
}

TEST_F(FolderLockTest, AFolderThatCannotHoldTheLockIsPermissionDenied) {
  EXPECT_THAT(FolderLock::Acquire("--state_dir", dir_ + "/missing"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr(dir_ + "/missing/LOCK")));
}

}  // namespace
}  // namespace lockstep
