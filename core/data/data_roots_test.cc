#include "core/data/data_roots.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/data/dataset.h"
#include "core/testing.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

MATCHER_P(IsOkAndHolds, value, "") {
  if (!arg.ok()) *result_listener << arg.status();
  return arg.ok() && *arg == value;
}

class DataRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / absl::StrCat("lockstep-roots-", getpid())).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/root/mnist");
    fs::create_directories(dir_ + "/elsewhere");
    ASSERT_OK_AND_ASSIGN(roots_,
                         DataRoots::Parse(absl::StrCat("/usr/share/datasets, ", dir_, "/root/")));
  }
  void TearDown() override { fs::remove_all(dir_); }
  // The refusal of `path`, with the path itself taken out of the text.
  std::string Refusal(const std::string& path) {
    absl::StatusOr<std::string> r = roots_.Resolve("dataset.path", path);
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("dataset.path: \"" + path + "\" is outside the data roots")));
    std::string text = r.status().ToString();
    return text.replace(text.find(path), path.size(), "PATH");
  }

  std::string dir_;
  DataRoots roots_;
};

TEST_F(DataRootsTest, ParsesAbsoluteFoldersOnly) {
  EXPECT_EQ(roots_.roots(), (std::vector<std::string>{"/usr/share/datasets", dir_ + "/root"}));
  ASSERT_OK_AND_ASSIGN(DataRoots defaults, DataRoots::Parse(kDefaultDataRoots));
  EXPECT_EQ(defaults.roots(), (std::vector<std::string>{"/usr/share/datasets",
                                                        "/usr/share/games/fortunes", "/data"}));
  EXPECT_THAT(DataRoots::Parse("/data,datasets"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"datasets\"")));
  EXPECT_THAT(DataRoots::Parse(" , "), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST_F(DataRootsTest, AcceptsWhatLiesInsideARoot) {
  EXPECT_THAT(roots_.Resolve("dataset.path", "/usr/share/datasets/fashion-mnist"),
              IsOkAndHolds(fs::canonical("/usr/share/datasets/fashion-mnist").string()));
  EXPECT_THAT(roots_.Resolve("dataset.path", dir_ + "/root/mnist/"), IsOk());
  EXPECT_THAT(roots_.Resolve("dataset.path", dir_ + "/root/./x/../mnist"), IsOk());
  // Missing inside a root: the loader says which file is missing.
  EXPECT_THAT(roots_.Resolve("dataset.path", dir_ + "/root/not-yet"), IsOk());
  // A link within the roots is fine.
  fs::create_directory_symlink(dir_ + "/root/mnist", dir_ + "/root/alias");
  EXPECT_THAT(roots_.Resolve("dataset.path", dir_ + "/root/alias"),
              IsOkAndHolds(fs::canonical(dir_ + "/root/mnist").string()));
  // No roots: anything, as given.
  EXPECT_THAT(DataRoots().Resolve("dataset.path", "../x"), IsOkAndHolds("../x"));
}

TEST_F(DataRootsTest, RefusesEverythingElseWithOneTextWhetherOrNotItExists) {
  const std::string text = Refusal("/etc/passwd");
  for (const std::string path :
       {"/etc/no-such-file", "/proc/self/environ", "/proc/self/no-such-file",
        "/usr/share/datasets/../../../etc/passwd", "/usr/share/datasets/../../../etc/nothing",
        "../../etc/passwd", "fashion-mnist", "/usr/share/datasets-evil", "/"}) {
    EXPECT_EQ(Refusal(path), text) << path;
  }
  // Links out of a root, to what exists and to what does not.
  fs::create_directory_symlink("/etc", dir_ + "/root/etc");
  fs::create_symlink("/etc/passwd", dir_ + "/root/passwd");
  fs::create_symlink("/etc/no-such-file", dir_ + "/root/dangling");
  fs::create_directory_symlink(dir_ + "/elsewhere", dir_ + "/root/out");
  for (const std::string link : {"/root/etc", "/root/etc/passwd", "/root/etc/no-such-file",
                                 "/root/passwd", "/root/dangling", "/root/out"}) {
    EXPECT_EQ(Refusal(dir_ + link), text) << link;
  }
  // The coordinator's lexical check gives the same text.
  std::string lexical = roots_.CheckLexically("dataset.path", "/etc/passwd").ToString();
  EXPECT_EQ(lexical.replace(lexical.find("/etc/passwd"), 11, "PATH"), text);
}

TEST_F(DataRootsTest, AFileLinkedOutOfARootIsRefusedByTheLoader) {
  // A root's dataset folder whose files link out: refused like the folder would be.
  fs::create_symlink("/etc/passwd", dir_ + "/root/mnist/train-images-idx3-ubyte.gz");
  EXPECT_THAT(LoadIdxDataset(dir_ + "/root/mnist", Split::kTrain, 1 << 20, roots_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the data roots")));
  fs::remove(dir_ + "/root/mnist/train-images-idx3-ubyte.gz");
  fs::create_symlink("/etc/no-such-file", dir_ + "/root/mnist/train-images-idx3-ubyte.gz");
  EXPECT_THAT(LoadIdxDataset(dir_ + "/root/mnist", Split::kTrain, 1 << 20, roots_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the data roots")));
}

}  // namespace
}  // namespace lockstep::testing
