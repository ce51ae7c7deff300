#include "services/coordinator/observability/tensorboard_writer.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/io/tfrecord.h"
#include "core/io/tmpfs_testing.h"
#include "core/testing.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class TensorBoardWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() / absl::StrCat("lockstep-tb-", getpid())).string();
    fs::remove_all(root_);
    fs::create_directories(root_);
    root_ = fs::canonical(root_).string();
  }
  void TearDown() override { fs::remove_all(root_); }

  // The records of an event file, their framing checked.
  static std::vector<tensorboard::Event> ReadEvents(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string bytes = ss.str();
    std::vector<tensorboard::Event> events;
    size_t at = 0;
    auto u32 = [&](size_t off) {
      uint32_t v;
      std::memcpy(&v, bytes.data() + off, 4);
      return v;
    };
    while (at < bytes.size()) {
      EXPECT_LE(at + 12, bytes.size());
      uint64_t len;
      std::memcpy(&len, bytes.data() + at, 8);
      EXPECT_EQ(u32(at + 8), MaskCrc32c(Crc32c(std::string_view(bytes.data() + at, 8))));
      const std::string_view data(bytes.data() + at + 12, len);
      EXPECT_EQ(u32(at + 12 + len), MaskCrc32c(Crc32c(data)));
      tensorboard::Event e;
      EXPECT_TRUE(e.ParseFromArray(data.data(), static_cast<int>(data.size())));
      events.push_back(e);
      at += 16 + len;
    }
    return events;
  }

  std::string root_;
};

TEST_F(TensorBoardWriterTest, WritesTheStepsAndEvaluationsAsScalars) {
  std::string path;
  {
    SerialExecutor io;
    auto writer = std::make_shared<TensorBoardWriter>(
        root_, "job-000001-ab", "", [](int64_t step) { return 0.125 * step; }, &io);
    for (int s = 1; s <= 3; ++s) {
      v1::StepEvent step;
      step.set_step(s);
      step.set_loss(2.5f / s);
      step.set_accuracy(0.25f * s);
      step.set_samples_per_sec(1000 + s);
      step.set_compute_ms(1.5);
      step.set_allreduce_ms(0.5);
      step.set_update_ms(0.25);
      writer->OnStep(step, 1700000000000 + s * 1000);
    }
    v1::EvalResult eval;
    eval.set_step(3);
    eval.set_test_loss(0.75);
    eval.set_test_accuracy(0.875);
    writer->OnEval(eval, 1700000004000);
    io.Post([&path, writer] { path = writer->path(); });
  }  // io's destructor runs what was posted
  ASSERT_THAT(path, StartsWith(root_ + "/job-000001-ab/events.out.tfevents."));
  const std::vector<tensorboard::Event> events = ReadEvents(path);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  std::map<std::pair<int64_t, std::string>, float> got;
  for (size_t i = 1; i < events.size(); ++i) {
    for (const auto& v : events[i].summary().value())
      got[{events[i].step(), v.tag()}] = v.simple_value();
  }
  EXPECT_EQ(events[2].wall_time(), 1700000002.0);
  EXPECT_EQ((got[{2, "train/loss"}]), 1.25f);
  EXPECT_EQ((got[{3, "train/accuracy"}]), 0.75f);
  EXPECT_EQ((got[{1, "perf/samples_per_sec"}]), 1001.0f);
  EXPECT_EQ((got[{1, "time/compute_ms"}]), 1.5f);
  EXPECT_EQ((got[{1, "time/allreduce_ms"}]), 0.5f);
  EXPECT_EQ((got[{1, "time/update_ms"}]), 0.25f);
  EXPECT_EQ((got[{3, "train/learning_rate"}]), 0.375f);
  EXPECT_EQ((got[{3, "eval/loss"}]), 0.75f);
  EXPECT_EQ((got[{3, "eval/accuracy"}]), 0.875f);
}

TEST(LearningRateOf, IsTheScheduleAtTheStepsCount) {
  v1::OptimizerSpec spec;
  spec.set_kind("sgd");
  spec.set_learning_rate(0.25);
  EXPECT_EQ(LearningRateOf(spec)(7), 0.25);
  spec.set_learning_rate(0);
  auto* piecewise = spec.mutable_schedule()->mutable_piecewise_constant();
  piecewise->set_init_value(1.0);
  (*piecewise->mutable_boundaries_and_scales())[2] = 0.5;
  const auto lr = LearningRateOf(spec);
  EXPECT_EQ(lr(1), 1.0);  // step 1's update used count 0
  EXPECT_EQ(lr(2), 1.0);
  EXPECT_EQ(lr(3), 0.5);
}

TEST_F(TensorBoardWriterTest, ANamedFolderStaysInTheJobsFolder) {
  ASSERT_OK_AND_ASSIGN(std::string dir, PrepareTensorBoardFolder(root_, "job-1", "runs/a"));
  EXPECT_EQ(dir, root_ + "/job-1/runs/a");
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_THAT(PrepareTensorBoardFolder(root_, "job-1", "/tmp/x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensorboard_dir")));
  EXPECT_THAT(PrepareTensorBoardFolder(root_, "job-1", "a/../../job-2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensorboard_dir")));
  fs::create_directories(root_ + "/elsewhere");
  fs::create_directory_symlink(root_ + "/elsewhere", root_ + "/job-1/out");
  EXPECT_THAT(PrepareTensorBoardFolder(root_, "job-1", "out/x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("leads out")));
}

TEST_F(TensorBoardWriterTest, AFolderThatCannotBeMadeWritesNothingAndFailsNothing) {
  std::ofstream(root_ + "/job-1") << "a file where the folder would be";
  std::string path = "unset";
  {
    SerialExecutor io;
    auto writer = std::make_shared<TensorBoardWriter>(
        root_, "job-1", "", [](int64_t) { return 0.1; }, &io);
    v1::StepEvent step;
    step.set_step(1);
    writer->OnStep(step, 0);
    writer->OnStep(step, 0);
    io.Post([&path, writer] { path = writer->path(); });
  }
  EXPECT_EQ(path, "");
}

// A disk that refuses writes while `full`, as a full disk does; what it took, in order.
struct FakeDisk {
  absl::Mutex mu;
  bool full ABSL_GUARDED_BY(mu) = false;
  std::string bytes ABSL_GUARDED_BY(mu);
  int refused ABSL_GUARDED_BY(mu) = 0;
};
class FakeFile final : public AppendFile {
 public:
  explicit FakeFile(FakeDisk* disk) : disk_(disk) {}
  absl::Status Append(std::string_view data) override {
    absl::MutexLock lock(&disk_->mu);
    if (disk_->full) {
      ++disk_->refused;
      return absl::ResourceExhaustedError("fake: No space left on device");
    }
    disk_->bytes.append(data);
    return absl::OkStatus();
  }

 private:
  FakeDisk* const disk_;
};

// Waits (bounded) until `io` has run what was posted before.
void Settle(SerialExecutor& io) {
  absl::Notification done;
  io.Post([&done] { done.Notify(); });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

v1::StepEvent Step(int s) {
  v1::StepEvent step;
  step.set_step(s);
  step.set_loss(1.0f / s);
  return step;
}

// The finding: after one ENOSPC the writer stopped for good. Now what the full disk
// refused is written once there is room, and the file reads whole, every step in order.
TEST_F(TensorBoardWriterTest, AfterAFullDiskEveryEventIsWrittenOnceThereIsRoom) {
  FakeDisk disk;
  SerialExecutor io;
  auto writer = std::make_shared<TensorBoardWriter>(
      root_, "job-1", "", [](int64_t) { return 0.1; }, &io,
      [&disk](const std::string&) -> absl::StatusOr<std::unique_ptr<AppendFile>> {
        return std::make_unique<FakeFile>(&disk);
      });
  writer->OnStep(Step(1), 0);
  Settle(io);
  {
    absl::MutexLock lock(&disk.mu);
    disk.full = true;
  }
  for (int s = 2; s <= 4; ++s) {
    writer->OnStep(Step(s), 0);
    Settle(io);
  }
  {
    absl::MutexLock lock(&disk.mu);
    EXPECT_EQ(disk.refused, 3);
    disk.full = false;
  }
  writer->OnStep(Step(5), 0);
  Settle(io);
  const std::string path = writer->path();
  {
    absl::MutexLock lock(&disk.mu);
    std::ofstream(root_ + "/copy", std::ios::binary) << disk.bytes;
  }
  const std::vector<tensorboard::Event> events = ReadEvents(root_ + "/copy");
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  for (int s = 1; s <= 5; ++s) EXPECT_EQ(events[s].step(), s);
  EXPECT_THAT(path, HasSubstr("events.out.tfevents."));
}

// The same on a real full disk: a tiny tmpfs.
TEST_F(TensorBoardWriterTest, OnATinyTmpfsTheWriterResumesAfterENOSPC) {
  TinyTmpfs disk(256 * 1024);
  LOCKSTEP_SKIP_WITHOUT_TMPFS(disk);
  SerialExecutor io;
  auto writer = std::make_shared<TensorBoardWriter>(
      disk.dir(), "job-1", "", [](int64_t) { return 0.1; }, &io);
  writer->OnStep(Step(1), 0);
  Settle(io);
  disk.Fill();
  // Enough to need more than the file's last page: some of it would fit.
  for (int s = 2; s <= 200; ++s) writer->OnStep(Step(s), 0);
  Settle(io);
  const std::string path = writer->path();
  ASSERT_FALSE(path.empty());
  EXPECT_LT(ReadEvents(path).size(), 200u);
  disk.Free();
  writer->OnStep(Step(201), 0);
  Settle(io);
  const std::vector<tensorboard::Event> events = ReadEvents(path);
  ASSERT_EQ(events.size(), 202u);
  for (int s = 1; s <= 201; ++s) EXPECT_EQ(events[s].step(), s);
}

}  // namespace
}  // namespace lockstep::testing
