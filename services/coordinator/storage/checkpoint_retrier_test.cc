// CheckpointRetrier and PendingCheckpoint: a final checkpoint the disk refuses is retried
// with backoff by the retrier's clock (no sleeps: a test clock) and at once on TryNow,
// written whole once the disk takes it, reported once, and the job's snapshots then go. A
// restarted coordinator's pending checkpoint comes back from the job's newest snapshot.
#include "services/coordinator/storage/checkpoint_retrier.h"

#include <atomic>
#include <filesystem>
#include <fstream>

#include "absl/synchronization/notification.h"
#include "core/checkpoint.h"
#include "core/io/tmpfs_testing.h"
#include "core/plan.h"
#include "core/spec/spec.h"
#include "core/spec/testing.h"
#include "core/testing.h"
#include "services/coordinator/storage/checkpoint_dirs_testing.h"
#include "services/coordinator/storage/snapshot_store.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class CheckpointRetrierTest : public CheckpointDirsTest {
 protected:
  void SetUp() override {
    spec_ = SmallMlpSpec(1, 10);
    ASSERT_OK_AND_ASSIGN(TrainSetup setup, SetupFromSpec(spec_));
    setup_ = std::make_unique<TrainSetup>(std::move(setup));
    state_ =
        TrainState::Create(setup_->model.Init(TrainingPlan::InitKey(7, setup_->impl), setup_->impl),
                           setup_->optimizer);
    state_.step = 10;
    job_snapshots_ = snapshots_ + "/job-000001";
    path_ = checkpoints_ + "/job-000001/checkpoint.safetensors";
  }
  // Makes the checkpoint's folder a file: every write of the checkpoint fails, as on a
  // disk that refuses it, until Unblock.
  void Block() { Touch(checkpoints_ + "/job-000001", "in the way"); }
  void Unblock() { fs::remove(checkpoints_ + "/job-000001"); }
  std::shared_ptr<PendingCheckpoint> Pending() {
    return std::make_shared<PendingCheckpoint>(
        "job-000001", spec_, path_, state_,
        std::map<std::string, std::string>{{"job_id", "job-000001"}}, job_snapshots_);
  }
  absl::Time Now() const { return absl::UnixEpoch() + absl::Milliseconds(now_ms_.load()); }
  void Advance(absl::Duration d) { now_ms_ += absl::ToInt64Milliseconds(d); }

  std::string job_snapshots_, path_;  // the job's snapshots, its checkpoint
  v1::JobSpec spec_;
  std::unique_ptr<TrainSetup> setup_;
  TrainState state_;
  std::atomic<int64_t> now_ms_{1000000};
};

TEST_F(CheckpointRetrierTest, ARefusedCheckpointIsRetriedWithBackoffAndWrittenOnceTheDiskTakesIt) {
  // The final snapshot that holds the state meanwhile.
  SnapshotStore store(job_snapshots_, 2);
  ASSERT_OK(store.Write(setup_->model, setup_->optimizer, state_, {}));
  Block();
  absl::Mutex mu;
  std::vector<std::string> written, failed;
  CheckpointRetrier retrier(
      [&](const std::string& id, const std::string& path) {
        absl::MutexLock lock(&mu);
        written.push_back(id + " " + path);
      },
      [&](const std::string& id, const absl::Status& why) {
        absl::MutexLock lock(&mu);
        failed.push_back(id + " " + std::string(why.message()));
      },
      [this] { return Now(); });
  retrier.Add(Pending());
  EXPECT_TRUE(retrier.Pending("job-000001"));
  // Due after kFirstRetry (1 s): it fails, and the next try is 2 s later.
  Advance(absl::Seconds(1));
  retrier.RetryDue();
  EXPECT_TRUE(retrier.Pending("job-000001"));
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(failed.size(), 1u);  // told once, not at every retry
    EXPECT_THAT(failed[0], HasSubstr(path_));
  }
  Unblock();
  Advance(absl::Milliseconds(1500));
  retrier.RetryDue();  // not due yet
  EXPECT_FALSE(fs::exists(path_));
  EXPECT_TRUE(retrier.Pending("job-000001"));
  Advance(absl::Milliseconds(500));
  retrier.RetryDue();
  EXPECT_FALSE(retrier.Pending("job-000001"));
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(written, std::vector<std::string>{"job-000001 " + path_});
  }
  ASSERT_OK_AND_ASSIGN(TrainState back, ReadCheckpoint(path_, setup_->model, setup_->optimizer));
  EXPECT_EQ(back.step, 10);
  EXPECT_TRUE(back.params == state_.params);
  EXPECT_FALSE(fs::exists(job_snapshots_));  // the checkpoint holds the end
  EXPECT_OK(retrier.TryNow("job-000001"));   // nothing pending: OK
}

TEST_F(CheckpointRetrierTest, TryNowWritesAtOnceOrSaysWhyNot) {
  Block();
  int written = 0;
  CheckpointRetrier retrier([&](const std::string&, const std::string&) { ++written; }, nullptr,
                            [this] { return Now(); });
  retrier.Add(Pending());
  EXPECT_THAT(retrier.TryNow("job-000001"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr(path_)));
  Unblock();
  EXPECT_OK(retrier.TryNow("job-000001"));  // at once: no clock moved
  EXPECT_EQ(written, 1);
  EXPECT_TRUE(fs::exists(path_));
}

// A restarted coordinator: the pending checkpoint's state from the job's newest snapshot,
// which must be the final step's.
TEST_F(CheckpointRetrierTest, APendingCheckpointComesBackFromTheFinalSnapshot) {
  SnapshotStore store(job_snapshots_, 2);
  TrainState earlier = state_;
  earlier.step = 5;
  ASSERT_OK(store.Write(setup_->model, setup_->optimizer, earlier, {{"job_id", "job-000001"}}));
  EXPECT_THAT(PendingCheckpoint::FromSnapshot("job-000001", spec_, path_, 10, job_snapshots_),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("newest snapshot is of step 5")));
  ASSERT_OK(store.Write(setup_->model, setup_->optimizer, state_, {{"job_id", "job-000001"}}));
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<PendingCheckpoint> pending,
      PendingCheckpoint::FromSnapshot("job-000001", spec_, path_, 10, job_snapshots_));
  ASSERT_OK(pending->Write());
  std::map<std::string, std::string> metadata;
  ASSERT_OK_AND_ASSIGN(TrainState back,
                       ReadCheckpoint(path_, setup_->model, setup_->optimizer, &metadata));
  EXPECT_TRUE(back.params == state_.params);
  EXPECT_EQ(metadata.at("job_id"), "job-000001");
}

// On a real full disk (a tiny tmpfs): the write fails with the disk's reason, nothing torn
// is left, and the same PendingCheckpoint writes it once space is back.
TEST_F(CheckpointRetrierTest, OnATinyFullTmpfsTheCheckpointWaitsForSpace) {
  TinyTmpfs disk(512 * 1024);
  LOCKSTEP_SKIP_WITHOUT_TMPFS(disk);
  path_ = disk.dir() + "/job-000001/checkpoint.safetensors";
  fs::create_directories(disk.dir() + "/job-000001");
  disk.Fill();
  std::shared_ptr<PendingCheckpoint> pending = Pending();
  EXPECT_THAT(pending->Write(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("No space left")));
  EXPECT_FALSE(fs::exists(path_));
  disk.Free();
  ASSERT_OK(pending->Write());
  ASSERT_OK_AND_ASSIGN(TrainState back, ReadCheckpoint(path_, setup_->model, setup_->optimizer));
  EXPECT_TRUE(back.params == state_.params);
}

}  // namespace
}  // namespace lockstep::testing
