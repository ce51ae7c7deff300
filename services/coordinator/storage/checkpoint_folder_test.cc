#include "services/coordinator/storage/checkpoint_folder.h"

#include <filesystem>
#include <fstream>

#include "core/testing.h"
#include "services/coordinator/storage/checkpoint_dirs_testing.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class CheckpointFolderTest : public CheckpointDirsTest {
 protected:
  void SetUp() override {
    fs::create_directories(checkpoints_);
    fs::create_directories(snapshots_);
  }
  CheckpointFolder folder() const { return CheckpointFolder(checkpoints_, snapshots_); }
};

TEST_F(CheckpointFolderTest, EachJobWritesInAFolderOfItsOwn) {
  EXPECT_EQ(folder().CheckpointPath("job-000002", "model.safetensors"),
            checkpoints_ + "/job-000002/model.safetensors");
  EXPECT_EQ(folder().CheckpointPath("job-000002", ""),
            checkpoints_ + "/job-000002/checkpoint.safetensors");
  ASSERT_OK_AND_ASSIGN(std::string path, folder().PrepareCheckpoint("job-000002", "", false));
  EXPECT_EQ(path, checkpoints_ + "/job-000002/checkpoint.safetensors");
  EXPECT_TRUE(fs::is_directory(checkpoints_ + "/job-000002"));
  EXPECT_FALSE(fs::exists(path));  // made when the job ends
  // Without a folder (`lockstep train`), the user's own path as given.
  const CheckpointFolder none("", "");
  EXPECT_EQ(none.CheckpointPath("job-1", ""), "");
  EXPECT_EQ(none.CheckpointPath("job-1", root_ + "/mine.safetensors"), root_ + "/mine.safetensors");
  EXPECT_THAT(none.PrepareCheckpoint("job-1", root_ + "/mine.safetensors", false), IsOk());
}

TEST_F(CheckpointFolderTest, AnotherJobsCheckpointCanBeNeitherOverwrittenNorReached) {
  const std::string theirs = checkpoints_ + "/job-000001/checkpoint.safetensors";
  Touch(theirs, "job 1's");
  // Its name, from another job, lands in that job's own folder.
  ASSERT_OK_AND_ASSIGN(
      std::string path,
      folder().PrepareCheckpoint("job-000002", "job-000001/checkpoint.safetensors", false));
  EXPECT_EQ(path, checkpoints_ + "/job-000002/job-000001/checkpoint.safetensors");
  // Climbing out, absolute paths, and links out of the job's folder are refused.
  for (const std::string& name :
       std::vector<std::string>{"../job-000001/checkpoint.safetensors", "a/../../x", theirs,
                                "link/checkpoint.safetensors"}) {
    if (name == "link/checkpoint.safetensors") {
      fs::create_directories(checkpoints_ + "/job-000003");
      fs::create_directory_symlink(checkpoints_ + "/job-000001", checkpoints_ + "/job-000003/link");
    }
    EXPECT_THAT(folder().PrepareCheckpoint("job-000003", name, false),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("checkpoint_path")))
        << name;
  }
  // A job folder that is a link to another's is not the job's folder.
  fs::create_directory_symlink(checkpoints_ + "/job-000001", checkpoints_ + "/job-000004");
  EXPECT_THAT(folder().PrepareCheckpoint("job-000004", "", false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("checkpoint_path")));
  EXPECT_EQ(ReadAll(theirs), "job 1's");
}

TEST_F(CheckpointFolderTest, NeverOverAnExistingFileUnlessTheJobResumes) {
  Touch(checkpoints_ + "/job-000005/out.safetensors");
  EXPECT_THAT(folder().PrepareCheckpoint("job-000005", "out.safetensors", false),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("out.safetensors")));
  // A dangling link is a file too: writing would replace it.
  fs::create_symlink(root_ + "/nowhere", checkpoints_ + "/job-000005/dangling.safetensors");
  EXPECT_THAT(folder().PrepareCheckpoint("job-000005", "dangling.safetensors", false),
              StatusIs(absl::StatusCode::kAlreadyExists, ::testing::_));
  // A restarted coordinator's job may find its own.
  EXPECT_THAT(folder().PrepareCheckpoint("job-000005", "out.safetensors", true), IsOk());
}

TEST_F(CheckpointFolderTest, ResumeFromAJobIdIsItsNewestSnapshotElseItsCheckpoint) {
  Touch(checkpoints_ + "/job-000001/sub/final.safetensors");
  ASSERT_OK_AND_ASSIGN(ResumeSource src, folder().ResolveResumeFrom("job-000001"));
  EXPECT_EQ(src.job_id, "job-000001");
  EXPECT_EQ(src.path, checkpoints_ + "/job-000001/sub/final.safetensors");
  Touch(snapshots_ + "/job-000001/step-000000000010.safetensors");
  Touch(snapshots_ + "/job-000001/step-000000000020.safetensors");
  ASSERT_OK_AND_ASSIGN(src, folder().ResolveResumeFrom("job-000001"));
  EXPECT_EQ(src.path, snapshots_ + "/job-000001/step-000000000020.safetensors");
  // Written before jobs had folders.
  Touch(checkpoints_ + "/job-000007.safetensors");
  ASSERT_OK_AND_ASSIGN(src, folder().ResolveResumeFrom("job-000007"));
  EXPECT_EQ(src.path, checkpoints_ + "/job-000007.safetensors");
  EXPECT_THAT(folder().ResolveResumeFrom("job-000008"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("job-000008")));
  Touch(checkpoints_ + "/job-000009/a.safetensors");
  Touch(checkpoints_ + "/job-000009/b.safetensors");
  EXPECT_THAT(folder().ResolveResumeFrom("job-000009"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name one")));
}

TEST_F(CheckpointFolderTest, ResumeFromAPathNamesItsJobIfItIsInOne) {
  Touch(checkpoints_ + "/job-000001/model.safetensors");
  Touch(checkpoints_ + "/pretrained/x.safetensors");
  ASSERT_OK_AND_ASSIGN(ResumeSource src,
                       folder().ResolveResumeFrom("job-000001/model.safetensors"));
  EXPECT_EQ(src.job_id, "job-000001");
  EXPECT_EQ(src.path, checkpoints_ + "/job-000001/model.safetensors");
  ASSERT_OK_AND_ASSIGN(src, folder().ResolveResumeFrom("pretrained/x.safetensors"));
  EXPECT_EQ(src.job_id, "");
  EXPECT_EQ(src.path, checkpoints_ + "/pretrained/x.safetensors");
  EXPECT_THAT(folder().ResolveResumeFrom("pretrained/y.safetensors"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("pretrained/y.safetensors")));
  // Without a folder, the user's own path.
  ASSERT_OK_AND_ASSIGN(src, CheckpointFolder("", "").ResolveResumeFrom("/home/me/x.safetensors"));
  EXPECT_EQ(src.path, "/home/me/x.safetensors");
}

TEST_F(CheckpointFolderTest, ResumeFromCannotLeaveTheFolderAndSaysSoAlikeForAnyTarget) {
  for (const std::string bad : {"/etc/passwd", "../snapshots/job-000001", "a/../../x"}) {
    EXPECT_THAT(folder().ResolveResumeFrom(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("resume_from")))
        << bad;
  }
  // Links out: one whose target exists, one whose target does not; the same answer.
  fs::create_symlink("/etc/passwd", checkpoints_ + "/exists");
  fs::create_symlink("/etc/no-such-file-here", checkpoints_ + "/missing");
  absl::Status a = folder().ResolveResumeFrom("exists").status();
  absl::Status b = folder().ResolveResumeFrom("missing").status();
  EXPECT_THAT(a, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("leads out")));
  EXPECT_EQ(a.code(), b.code());
  EXPECT_EQ(std::string(a.message()).replace(a.message().find("exists"), 6, "missing"),
            b.message());
}

}  // namespace
}  // namespace lockstep::testing
