// AppendFile on a tiny tmpfs: an append the full disk refuses is RESOURCE_EXHAUSTED naming
// the file and leaves it as it was; once there is room again the same append succeeds, and
// the file holds exactly the appends that succeeded.
#include "core/io/append_file.h"

#include <filesystem>

#include "core/io/tmpfs_testing.h"
#include "core/testing.h"

namespace lockstep::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(AppendFile, AFullDiskRefusesWholeAppendsAndTheyWorkOnceThereIsRoom) {
  TinyTmpfs disk(64 * 1024);
  LOCKSTEP_SKIP_WITHOUT_TMPFS(disk);
  const std::string path = disk.dir() + "/events";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<AppendFile> file, AppendFile::Open(path));
  ASSERT_OK(file->Append("first;"));
  disk.Fill();
  const std::string big(20000, 'b');  // more than one page: some of it would fit
  EXPECT_THAT(file->Append(big), StatusIs(absl::StatusCode::kResourceExhausted,
                                          AllOf(HasSubstr(path), HasSubstr("No space left"))));
  EXPECT_EQ(ReadAll(path), "first;");  // nothing torn
  disk.Free();
  ASSERT_OK(file->Append(big));
  ASSERT_OK(file->Append(";last"));
  EXPECT_EQ(ReadAll(path), "first;" + big + ";last");
}

TEST(AppendFile, AFileInAMissingFolderIsNotFoundNamingIt) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "no-such-folder-append" / "f").string();
  EXPECT_THAT(AppendFile::Open(path),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no-such-folder-append")));
}

}  // namespace
}  // namespace lockstep::testing
