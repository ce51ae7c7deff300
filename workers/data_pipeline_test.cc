#include "workers/data_pipeline.h"

#include <atomic>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

constexpr Dims kShape{2, 2, 1};

// Raw 2x2 examples: pixel j of example i is (i * 4 + j) % 256, label i % 10 (or `label`
// for example `bad_label_at`). Reading `fail_at` fails; reading `block_at` waits for
// `release`. Checks at every read that the pipeline holds at most `max_held` batches.
class TestSource final : public ExampleSource {
 public:
  explicit TestSource(int64_t size) : size_(size) {}
  int64_t size() const override { return size_; }
  std::optional<Dims> stored_shape() const override { return kShape; }
  absl::Status Read(int64_t index, StoredExample* out) const override {
    reads_.fetch_add(1);
    if (index == block_at) {
      if (!entered.HasBeenNotified()) entered.Notify();
      release.WaitForNotification();
    }
    if (index == fail_at) {
      return absl::DataLossError(absl::StrCat(Where(index), ": CRC mismatch"));
    }
    out->kind = StoredExample::Kind::kRaw;
    out->shape = kShape;
    out->bytes.resize(4);
    for (int j = 0; j < 4; ++j) out->bytes[j] = static_cast<char>((index * 4 + j) % 256);
    out->label = index == bad_label_at ? label : index % 10;
    return absl::OkStatus();
  }
  std::string Where(int64_t index) const override {
    return absl::StrCat("test.rec: record ", index);
  }
  MaxLabel max_label() const override { return {9, 9}; }

  int64_t reads() const { return reads_.load(); }

  int64_t fail_at = -1, block_at = -1, bad_label_at = -1, label = 0;
  mutable absl::Notification entered, release;

 private:
  int64_t size_;
  mutable std::atomic<int64_t> reads_{0};
};

// pixel / 255 + key.k0 % 1000 (so the example key shows in every value).
class TestTransform final : public ImageTransform {
 public:
  const Dims& output_shape() const override { return shape_; }
  bool random() const override { return true; }
  std::unique_ptr<Scratch> NewScratch() const override { return std::make_unique<Scratch>(); }
  absl::Status Apply(const StoredExample& ex, rng::Key key, Scratch*, float* out) const override {
    for (int j = 0; j < 4; ++j) {
      out[j] = static_cast<float>(static_cast<uint8_t>(ex.bytes[j])) / 255.0f +
               static_cast<float>(key.k0 % 1000);
    }
    return absl::OkStatus();
  }

 private:
  Dims shape_ = kShape;
};

std::vector<float> Expected(std::span<const int32_t> indices, rng::Key key) {
  std::vector<float> out;
  for (int32_t i : indices) {
    const rng::Key k = rng::FoldIn(key, static_cast<uint32_t>(i));
    for (int j = 0; j < 4; ++j) {
      out.push_back(static_cast<float>((i * 4 + j) % 256) / 255.0f +
                    static_cast<float>(k.k0 % 1000));
    }
  }
  return out;
}

struct Fixture {
  explicit Fixture(int64_t size, DataPipeline::Options options = {})
      : source(std::make_shared<TestSource>(size)) {
    pipeline = std::make_unique<DataPipeline>(source, std::make_shared<TestTransform>(), options);
  }
  std::shared_ptr<TestSource> source;
  std::unique_ptr<DataPipeline> pipeline;
};

TEST(DataPipelineTest, TakeMakesTheBatchWithEachExamplesOwnKey) {
  for (int threads : {0, 1, 3}) {
    Fixture f(100, {.threads = threads});
    const std::vector<int32_t> idx = {7, 3, 99, 0, 42};
    std::vector<float> images(idx.size() * 4);
    std::vector<int32_t> labels(idx.size());
    const rng::Key key{11, 22};
    ASSERT_OK(f.pipeline->Take(0, key, idx, images.data(), labels.data()));
    EXPECT_EQ(images, Expected(idx, key)) << threads << " threads";
    EXPECT_THAT(labels, ::testing::ElementsAre(7, 3, 9, 0, 2));
  }
}

TEST(DataPipelineTest, BatchesMadeAheadAreTakenWithoutReadingAgain) {
  Fixture f(1000, {.threads = 2, .max_batches = 3});
  std::vector<std::vector<int32_t>> steps;
  for (int s = 0; s < 8; ++s) {
    steps.emplace_back(16);
    std::iota(steps.back().begin(), steps.back().end(), s * 16);
    f.pipeline->Prefetch(s, {1, static_cast<uint32_t>(s)}, steps.back());
  }
  std::vector<float> images(16 * 4);
  std::vector<int32_t> labels(16);
  for (int s = 0; s < 8; ++s) {
    ASSERT_OK(
        f.pipeline->Take(s, {1, static_cast<uint32_t>(s)}, steps[s], images.data(), labels.data()));
    EXPECT_EQ(images, Expected(steps[s], {1, static_cast<uint32_t>(s)}));
  }
  EXPECT_EQ(f.source->reads(), 8 * 16);  // every example once
  EXPECT_EQ(f.pipeline->decoded(), 8 * 16);
}

TEST(DataPipelineTest, HoldsAtMostMaxBatchesAhead) {
  // Example 64 (batch 4's first) blocks: threads fill batches 0-2 (max_batches 3) and stop,
  // batch 3 waits without buffers until one is taken.
  Fixture f(1000, {.threads = 2, .max_batches = 3});
  f.source->block_at = 3 * 16;
  std::vector<std::vector<int32_t>> steps;
  for (int s = 0; s < 6; ++s) {
    steps.emplace_back(16);
    std::iota(steps.back().begin(), steps.back().end(), s * 16);
    f.pipeline->Prefetch(s, {}, steps.back());
  }
  std::vector<float> images(16 * 4);
  std::vector<int32_t> labels(16);
  for (int s = 0; s < 3; ++s) {
    ASSERT_OK(f.pipeline->Take(s, {}, steps[s], images.data(), labels.data()));
    // Taking batch s frees its buffer for batch s + 3; nothing past that is read.
    EXPECT_LE(f.source->reads(), (s + 4) * 16 + 1);
  }
  f.source->release.Notify();
  for (int s = 3; s < 6; ++s) {
    ASSERT_OK(f.pipeline->Take(s, {}, steps[s], images.data(), labels.data()));
  }
  EXPECT_EQ(f.source->reads(), 6 * 16);
}

TEST(DataPipelineTest, ABatchAskedForUnderAnotherKeyIsMadeAgain) {
  Fixture f(100, {.threads = 1});
  const std::vector<int32_t> idx = {1, 2, 3};
  f.pipeline->Prefetch(5, {1, 1}, idx);
  std::vector<float> images(12);
  std::vector<int32_t> labels(3);
  ASSERT_OK(f.pipeline->Take(5, {2, 2}, idx, images.data(), labels.data()));
  EXPECT_EQ(images, Expected(idx, {2, 2}));
}

TEST(DataPipelineTest, AFailedExampleFailsItsBatchNamingWhereItLives) {
  Fixture f(100, {.threads = 2});
  f.source->fail_at = 13;
  const std::vector<int32_t> idx = {10, 11, 12, 13, 14, 15, 16, 17, 18};
  std::vector<float> images(idx.size() * 4);
  std::vector<int32_t> labels(idx.size());
  f.pipeline->Prefetch(0, {}, idx);
  EXPECT_THAT(
      f.pipeline->Take(0, {}, idx, images.data(), labels.data()),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("test.rec: record 13: CRC mismatch")));
  // The pipeline goes on: the next batch is fine.
  const std::vector<int32_t> next = {20, 21};
  EXPECT_OK(f.pipeline->Take(1, {}, next, images.data(), labels.data()));
}

TEST(DataPipelineTest, LabelsOutsideTheModelsClassesAndIndicesOutsideTheSplitAreRefused) {
  Fixture f(100, {.threads = 1, .num_classes = 10});
  f.source->bad_label_at = 4;
  f.source->label = 12;
  std::vector<float> images(8);
  std::vector<int32_t> labels(2);
  const std::vector<int32_t> idx = {3, 4};
  EXPECT_THAT(f.pipeline->Take(0, {}, idx, images.data(), labels.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("test.rec: record 4: label 12 is not in [0, 10)")));
  f.source->label = -1;
  EXPECT_THAT(f.pipeline->Take(1, {}, idx, images.data(), labels.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("test.rec: record 4: label -1 is not in [0, 10)")));
  const std::vector<int32_t> outside = {100};
  EXPECT_THAT(f.pipeline->Take(2, {}, outside, images.data(), labels.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sample index 100 is outside the dataset (100 examples)")));
}

TEST(DataPipelineTest, AbortEndsATakeWaitingForAStalledRead) {
  Fixture f(100, {.threads = 1});
  f.source->block_at = 5;
  const std::vector<int32_t> idx = {5};
  std::vector<float> images(4);
  std::vector<int32_t> labels(1);
  f.pipeline->Prefetch(0, {}, idx);
  f.source->entered.WaitForNotification();  // the decode thread blocks in Read
  absl::Status taken;
  absl::Notification done;
  std::thread t([&] {
    taken = f.pipeline->Take(0, {}, idx, images.data(), labels.data());
    done.Notify();
  });
  f.pipeline->Abort(absl::UnavailableError("the job was released"));
  t.join();
  EXPECT_THAT(taken, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("released")));
  f.source->release.Notify();  // lets the thread finish, so the pipeline can stop
}

TEST(DataPipelineTest, AStalledReadEndsTakeAfterTheStallTimeout) {
  Fixture f(100, {.threads = 1, .stall_timeout = absl::Milliseconds(50)});
  f.source->block_at = 5;
  const std::vector<int32_t> idx = {5};
  std::vector<float> images(4);
  std::vector<int32_t> labels(1);
  f.pipeline->Prefetch(0, {}, idx);
  f.source->entered.WaitForNotification();  // the decode thread blocks in Read
  EXPECT_THAT(f.pipeline->Take(0, {}, idx, images.data(), labels.data()),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("stalled")));
  f.source->release.Notify();
}

}  // namespace
}  // namespace lockstep
