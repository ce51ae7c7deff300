// Tests of private_files.h: the umask the servers set, a loose folder tightened (and its
// symlinks left alone), private writes over looser files.
#include "services/common/security/private_files.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/testing.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

mode_t Mode(const fs::path& p) {
  struct stat st;
  EXPECT_EQ(lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

class PrivateFilesTest : public ::testing::Test {
 protected:
  PrivateFilesTest() {
    old_umask_ = umask(022);
    std::string templ = "/tmp/private_files_test.XXXXXX";
    EXPECT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  ~PrivateFilesTest() override {
    umask(old_umask_);
    fs::remove_all(dir_);
  }
  void Touch(const fs::path& p, mode_t mode) {
    std::ofstream(p) << "secret";
    fs::permissions(p, static_cast<fs::perms>(mode));
  }
  fs::path dir_;
  mode_t old_umask_;
};

TEST_F(PrivateFilesTest, AfterSetPrivateUmaskNewFilesAndFoldersAreTheOwnersOnly) {
  SetPrivateUmask();
  std::ofstream(dir_ / "f") << "x";
  fs::create_directories(dir_ / "a" / "b");
  EXPECT_EQ(Mode(dir_ / "f"), 0600u);
  EXPECT_EQ(Mode(dir_ / "a"), 0700u);
  EXPECT_EQ(Mode(dir_ / "a" / "b"), 0700u);
}

TEST_F(PrivateFilesTest, TightenModesTakesGroupAndOtherBitsOffEverythingButSymlinks) {
  const fs::path state = dir_ / "state";
  fs::create_directories(state / "jobs");
  fs::create_directories(state / "snapshots" / "j1");
  fs::permissions(state, static_cast<fs::perms>(0755));
  fs::permissions(state / "snapshots", static_cast<fs::perms>(0775));
  Touch(state / "jobs" / "j1.json", 0644);
  Touch(state / "snapshots" / "j1" / "step.safetensors", 0666);
  Touch(state / "already", 0600);
  // A symlink to a file outside: neither followed nor changed.
  Touch(dir_ / "outside", 0644);
  fs::create_symlink(dir_ / "outside", state / "link");
  ASSERT_OK_AND_ASSIGN(Tightened done, TightenModes(state.string()));
  // state, jobs, snapshots, snapshots/j1, and the two loose files.
  EXPECT_EQ(done.changed, 6);
  EXPECT_EQ(done.not_ours, 0);
  EXPECT_EQ(Mode(state), 0700u);
  EXPECT_EQ(Mode(state / "jobs"), 0700u);
  EXPECT_EQ(Mode(state / "snapshots"), 0700u);
  EXPECT_EQ(Mode(state / "jobs" / "j1.json"), 0600u);
  EXPECT_EQ(Mode(state / "snapshots" / "j1" / "step.safetensors"), 0600u);
  EXPECT_EQ(Mode(state / "already"), 0600u);
  EXPECT_EQ(Mode(dir_ / "outside"), 0644u);
  // Nothing left to do the second time.
  ASSERT_OK_AND_ASSIGN(done, TightenModes(state.string()));
  EXPECT_EQ(done.changed, 0);
  EXPECT_THAT(TightenModes((dir_ / "missing").string()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing")));
}

TEST_F(PrivateFilesTest, MakeFolderPrivateCreatesAMissingFolderPrivateAndTightensAnOldOne) {
  ASSERT_OK(MakeFolderPrivate("--state_dir", (dir_ / "new" / "state").string()));
  EXPECT_EQ(Mode(dir_ / "new" / "state"), 0700u);
  fs::permissions(dir_, static_cast<fs::perms>(0755));
  Touch(dir_ / "old", 0644);
  ASSERT_OK(MakeFolderPrivate("--state_dir", dir_.string()));
  EXPECT_EQ(Mode(dir_), 0700u);
  EXPECT_EQ(Mode(dir_ / "old"), 0600u);
  Touch(dir_ / "file", 0644);
  EXPECT_THAT(MakeFolderPrivate("--state_dir", (dir_ / "file" / "sub").string()),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("--state_dir")));
}

TEST_F(PrivateFilesTest, WritePrivateReplacesALooserFileWithAnOwnerOnlyOne) {
  const fs::path secrets = dir_ / "secrets.yaml";
  Touch(secrets, 0644);
  ASSERT_OK(WritePrivate(secrets.string(), "key: value\n"));
  EXPECT_EQ(Mode(secrets), 0600u);
  std::ifstream in(secrets);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "key: value\n");
  EXPECT_FALSE(fs::exists(dir_ / "secrets.yaml.tmp"));
  EXPECT_THAT(WritePrivate((dir_ / "no" / "such").string(), "x"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("no/such")));
}

}  // namespace
}  // namespace lockstep::testing
