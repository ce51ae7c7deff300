#include "core/io/paths.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "core/testing.h"

namespace lockstep::testing {
namespace {

TEST(IsWithin, ComparesWholeComponents) {
  EXPECT_TRUE(IsWithin("/data", "/data"));
  EXPECT_TRUE(IsWithin("/data/x/y", "/data"));
  EXPECT_TRUE(IsWithin("/data/x", "/data/"));
  EXPECT_TRUE(IsWithin("/anything", "/"));
  EXPECT_FALSE(IsWithin("/database", "/data"));
  EXPECT_FALSE(IsWithin("/", "/data"));
  EXPECT_FALSE(IsWithin("/etc/passwd", "/usr/share/datasets"));
  EXPECT_TRUE(IsWithin("state/checkpoints/job-1/x", "state/checkpoints/job-1"));
  EXPECT_FALSE(IsWithin("state/checkpoints/job-10/x", "state/checkpoints/job-1"));
}

TEST(ResolvePath, FollowsEveryLinkDanglingOrNot) {
  namespace fs = std::filesystem;
  const fs::path d =
      fs::weakly_canonical(fs::temp_directory_path()) / absl::StrCat("lockstep-paths-", getpid());
  fs::remove_all(d);
  fs::create_directories(d / "real");
  fs::create_directory_symlink(d / "real", d / "alias");
  fs::create_symlink("/etc/no-such-file-here", d / "dangling");
  fs::create_symlink("dangling", d / "relative");  // a link to a link, relative
  fs::create_symlink(d / "loop", d / "loop");
  EXPECT_EQ(ResolvePath(d / "alias/x/y"), d / "real/x/y");
  EXPECT_EQ(ResolvePath(d / "dangling"), fs::path("/etc/no-such-file-here"));
  EXPECT_EQ(ResolvePath(d / "relative/z"), fs::path("/etc/no-such-file-here/z"));
  EXPECT_EQ(ResolvePath(d / "real/../alias/./x"), d / "real/x");
  EXPECT_EQ(ResolvePath(d / "loop"), fs::path());
  fs::remove_all(d);
}

}  // namespace
}  // namespace lockstep::testing
