// Tests of WriteFileDurably: what a write leaves, its errors, and that a kill -9 at any
// moment of a rewrite leaves the old contents or the new ones, whole.
#include "core/io/durable_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "core/io/kill_testing.h"
#include "core/testing.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// This process's umask (read by setting it: the tests run one at a time).
mode_t CurrentUmask() {
  const mode_t mask = umask(0);
  umask(mask);
  return mask;
}

// `bytes` bytes that differ from those of any other `seed` at every 8-byte word.
std::string Contents(size_t bytes, uint64_t seed) {
  std::string s(bytes, '\0');
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < bytes; ++i) {
    if (i % 8 == 0) x = x * 6364136223846793005ull + 1442695040888963407ull + seed;
    s[i] = static_cast<char>(x >> (8 * (i % 8)));
  }
  return s;
}

class DurableFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "durable_file_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::vector<std::string> Files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string dir_;
};

TEST_F(DurableFileTest, WritesTheConcatenationOfThePartsAndNoTemporaryFile) {
  const std::string path = dir_ + "/a.bin";
  ASSERT_OK(WriteFileDurably(path, {"hello, ", "", std::string_view("world\0!", 7)}));
  EXPECT_EQ(ReadAll(path), std::string("hello, world\0!", 14));
  EXPECT_THAT(Files(), ElementsAre("a.bin"));
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u & ~CurrentUmask());  // as any new file, not mkstemp's 0600
}

TEST_F(DurableFileTest, TheFileTakesTheUmaskAsAnyNewFileWould) {
  for (const mode_t mask : {mode_t{022}, mode_t{077}}) {
    const mode_t old = umask(mask);
    const std::string path = dir_ + "/m" + std::to_string(mask);
    const absl::Status written = WriteFileDurably(path, {"x"});
    umask(old);
    ASSERT_OK(written);
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0666u & ~mask) << "umask " << std::oct << mask;
  }
}

TEST_F(DurableFileTest, ReplacesTheOldContentsWhole) {
  const std::string path = dir_ + "/a.bin";
  ASSERT_OK(WriteFileDurably(path, {Contents(100000, 1)}));
  ASSERT_OK(WriteFileDurably(path, {"short"}));
  EXPECT_EQ(ReadAll(path), "short");
  ASSERT_OK(WriteFileDurably(path, {}));
  EXPECT_EQ(ReadAll(path), "");
  EXPECT_TRUE(fs::exists(path));
  EXPECT_THAT(Files(), ElementsAre("a.bin"));
}

TEST_F(DurableFileTest, AFolderThatCannotBeWrittenIsPermissionDeniedNamingThePath) {
  // A path below a plain file (ENOTDIR, whoever runs the test) and one below a missing folder.
  std::ofstream(dir_ + "/file") << "a file, not a folder";
  for (const std::string& path : {dir_ + "/file/a.bin", dir_ + "/missing/a.bin"}) {
    EXPECT_THAT(WriteFileDurably(path, {"x"}),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr(path)));
  }
}

TEST_F(DurableFileTest, CheckWritableMakesTheFolderAndLeavesNoFile) {
  ASSERT_OK(CheckWritable(dir_ + "/new/folder/a.bin"));
  EXPECT_TRUE(fs::is_directory(dir_ + "/new/folder"));
  EXPECT_TRUE(fs::is_empty(dir_ + "/new/folder"));
  std::ofstream(dir_ + "/file") << "a file, not a folder";
  EXPECT_THAT(CheckWritable(dir_ + "/file/a.bin"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr(dir_ + "/file/a.bin")));
  EXPECT_EQ(ReadAll(dir_ + "/file"), "a file, not a folder");
}

TEST_F(DurableFileTest, AFailedRenameIsDataLossAndLeavesNoTemporaryFile) {
  const std::string path = dir_ + "/occupied";
  fs::create_directories(path + "/inside");  // a non-empty folder cannot be renamed over
  EXPECT_THAT(WriteFileDurably(path, {"x"}),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(path), HasSubstr("rename"))));
  EXPECT_THAT(Files(), ElementsAre("occupied"));
}

TEST(DurableFileNames, TemporaryFileNamesAreTellable) {
  EXPECT_TRUE(IsTemporaryFileName("job-000001.json.aZ09xY.tmp"));
  EXPECT_TRUE(IsTemporaryFileName("step-000000000005.safetensors.Qw3rty.tmp"));
  EXPECT_TRUE(IsTemporaryFileName("job-000001.json.tmp"));  // what earlier writes left
  EXPECT_FALSE(IsTemporaryFileName("job-000001.json"));
  EXPECT_FALSE(IsTemporaryFileName(".tmp"));
  EXPECT_FALSE(IsTemporaryFileName("a.json.abcdef.tmp2"));
  EXPECT_FALSE(IsTemporaryFileName("a.tmp.json"));
}

TEST_F(DurableFileTest, RemoveTemporaryFilesRemovesOnlyThem) {
  ASSERT_OK(WriteFileDurably(dir_ + "/a.json", {"{}"}));
  std::ofstream(dir_ + "/a.json.Xy12Zz.tmp") << "{";
  std::ofstream(dir_ + "/b.json.000000.tmp") << "[";
  std::ofstream(dir_ + "/c.json.tmp") << "{\"id";
  std::ofstream(dir_ + "/c.json") << "{}";
  fs::create_directories(dir_ + "/sub");
  std::ofstream(dir_ + "/sub/c.json.abcdef.tmp") << "below: not touched";
  fs::create_directories(dir_ + "/folder.tmp");  // not a file: not touched
  EXPECT_EQ(RemoveTemporaryFiles(dir_), 3);
  EXPECT_THAT(Files(), ElementsAre("a.json", "c.json", "folder.tmp", "sub"));
  EXPECT_TRUE(fs::exists(dir_ + "/sub/c.json.abcdef.tmp"));
  EXPECT_EQ(RemoveTemporaryFiles(dir_ + "/missing"), 0);
}

// A write in flight holds a lock on its temporary file; a file just created, not yet locked,
// is empty. Either is left be.
TEST_F(DurableFileTest, RemoveTemporaryFilesLeavesWritesInFlightBe) {
  const std::string locked = dir_ + "/a.json.Ab12Cd.tmp", fresh = dir_ + "/b.json.Ef34Gh.tmp";
  std::ofstream(locked) << "{\"id\": ";
  std::ofstream(fresh) << "";
  const int fd = open(locked.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX), 0);
  EXPECT_EQ(RemoveTemporaryFiles(dir_), 0);
  EXPECT_THAT(Files(), ElementsAre("a.json.Ab12Cd.tmp", "b.json.Ef34Gh.tmp"));
  close(fd);  // the writer is gone
  EXPECT_EQ(RemoveTemporaryFiles(dir_), 1);
  EXPECT_THAT(Files(), ElementsAre("b.json.Ef34Gh.tmp"));
}

// Two writers of one path: with one temporary name for both, the second's O_TRUNC could
// cut the file the first was about to rename into place.
TEST_F(DurableFileTest, ConcurrentWritersOfOnePathNeverTearIt) {
  const std::string path = dir_ + "/shared.bin";
  const std::string a = Contents(256 << 10, 1), b = Contents(256 << 10, 2);
  ASSERT_OK(WriteFileDurably(path, {a}));
  std::atomic<int> running{2};
  auto writer = [&](const std::string& contents) {
    for (int i = 0; i < 25; ++i) EXPECT_THAT(WriteFileDurably(path, {contents}), IsOk());
    --running;
  };
  std::thread ta(writer, std::cref(a)), tb(writer, std::cref(b));
  int reads = 0, torn = 0;
  while (running > 0) {
    const std::string got = ReadAll(path);
    ++reads;
    if (got != a && got != b) ++torn;
  }
  ta.join();
  tb.join();
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
  const std::string last = ReadAll(path);
  EXPECT_TRUE(last == a || last == b);
  EXPECT_THAT(Files(), ElementsAre("shared.bin"));
}

// The child rewrites one file in a loop, alternating two contents of 3 MB; after every kill
// the file holds one of them whole, and what else is in the folder is temporary files that
// a reader can tell apart and that RemoveTemporaryFiles removes.
TEST_F(DurableFileTest, AKillDuringRewritesLeavesOneOfTheContentsWhole) {
  const std::string path = dir_ + "/state.bin";
  const std::string contents[2] = {Contents(3 << 20, 7), Contents(3 << 20, 8)};
  int seen[2] = {0, 0};
  int kills_mid_write = 0;  // kills that left a temporary file: they hit a write
  size_t temporaries = 0;
  auto write = [&](int trial, int64_t n) {
    return WriteFileDurably(path, {contents[(trial + n) % 2]}).ok();
  };
  auto check = [&](int trial) {
    ASSERT_TRUE(fs::exists(path)) << "trial " << trial << ": the file is gone";
    const std::string got = ReadAll(path);
    ASSERT_TRUE(got == contents[0] || got == contents[1])
        << "trial " << trial << ": torn, " << got.size() << " bytes";
    ++seen[got == contents[1]];
    size_t tmp = 0;
    for (const std::string& name : Files()) {
      if (name == "state.bin") continue;
      ASSERT_TRUE(IsTemporaryFileName(name)) << "trial " << trial << ": " << name;
      ASSERT_TRUE(name.rfind("state.bin.", 0) == 0) << name;
      ++tmp;
    }
    // Each kill leaves at most one; they accumulate, under names of their own.
    ASSERT_LE(tmp, temporaries + 1) << "trial " << trial;
    kills_mid_write += tmp > temporaries;
    temporaries = tmp;
  };
  const KillTrials trials{.trials = 40, .seed = 20240611, .min_delay_ms = 2, .max_delay_ms = 50};
  int64_t writes = 0;
  KillDuringWrites(trials, write, check, &writes);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(writes, trials.trials);  // the kills came amid rewrites, not before the first
  EXPECT_GE(kills_mid_write, trials.trials / 4);  // others hit the folder's fsync
  // Their writers are dead: all go, but for any a kill left empty (RemoveTemporaryFiles
  // cannot tell those from a write that has only just begun).
  const int removed = RemoveTemporaryFiles(dir_);
  for (const std::string& name : Files()) {
    if (name != "state.bin") EXPECT_EQ(fs::file_size(dir_ + "/" + name), 0u) << name;
  }
  EXPECT_EQ(Files().size(), 1 + temporaries - removed);
  std::cout << trials.trials << " kills, " << writes << " complete writes, " << kills_mid_write
            << " kills mid-write; contents " << seen[0] << "/" << seen[1] << "\n";
}

}  // namespace
}  // namespace lockstep::testing
