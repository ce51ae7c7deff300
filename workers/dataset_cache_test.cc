// DatasetCache: files inside the data roots load, once; files outside are refused naming
// the field, for every format that reads files (npz, text, tokens) as for idx's folder.
#include "workers/dataset_cache.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/testing.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::StatusIs;

class DatasetCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(root_);
    std::ofstream(root_ + "/train.txt") << "the quick brown fox jumps over the lazy dog";
    std::ofstream(root_ + "/test.txt") << "pack my box with five dozen liquor jugs";
  }
  void TearDown() override { fs::remove_all(root_); }

  v1::DatasetSpec Text(const std::string& dir) const {
    v1::DatasetSpec spec;
    spec.set_format("text");
    spec.set_train_path(dir + "/train.txt");
    spec.set_test_path(dir + "/test.txt");
    spec.set_context(8);
    return spec;
  }

  const std::string root_ =
      (fs::temp_directory_path() / absl::StrCat("lockstep-dataset-cache-", getpid())).string();
};

TEST_F(DatasetCacheTest, ATextDatasetInsideTheRootsLoadsOnce) {
  ASSERT_OK_AND_ASSIGN(DataRoots roots, DataRoots::Parse(root_));
  DatasetCache cache(2, roots);
  ASSERT_OK_AND_ASSIGN(auto first, cache.Get(Text(root_)));
  EXPECT_EQ(first->train.size, (43 - 1) / 8);  // windows of 9 bytes, one shared
  EXPECT_EQ(first->test.size, (39 - 1) / 8);
  ASSERT_OK_AND_ASSIGN(auto again, cache.Get(Text(root_)));
  EXPECT_EQ(first.get(), again.get());
}

TEST_F(DatasetCacheTest, FilesOutsideTheRootsAreRefusedNamingTheField) {
  ASSERT_OK_AND_ASSIGN(DataRoots roots, DataRoots::Parse("/usr/share/datasets"));
  DatasetCache cache(2, roots);
  for (const char* format : {"text", "tokens"}) {
    v1::DatasetSpec spec = Text(root_);
    spec.set_format(format);
    EXPECT_THAT(cache.Get(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("dataset.train_path: \"" + root_)))
        << format;
  }
}

}  // namespace
}  // namespace lockstep
