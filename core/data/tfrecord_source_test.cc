#include "core/data/tfrecord_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <utime.h>

#include <cstring>
#include <filesystem>

#include "core/data/dataset.h"
#include "core/data/idx.h"
#include "core/data/image_testing.h"
#include "core/data/image_transform.h"
#include "core/data/tfrecord_index.h"
#include "core/data/tfrecord_testing.h"
#include "core/io/tfrecord.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::lockstep::testing::ImageRecord;
using ::lockstep::testing::ScratchDir;
using ::lockstep::testing::StatusIs;
using ::lockstep::testing::TfRecordShardBytes;
using ::lockstep::testing::TfRecordShardName;
using ::lockstep::testing::WriteTfRecordShards;
using ::testing::AllOf;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::vector<ImageRecord> Records(int n) {
  std::vector<ImageRecord> r;
  for (int i = 0; i < n; ++i) r.push_back({absl::StrCat("image-", i, std::string(i, '#')), i % 7});
  return r;
}

class TfRecordSourceTest : public ::testing::Test {
 protected:
  v1::DatasetSpec Spec() const {
    v1::DatasetSpec s;
    s.set_format("tfrecord");
    s.set_path(dir_.path().string());
    s.set_name("fm");
    s.set_train_split("train");
    s.set_test_split("test");
    s.set_image_key("image");
    s.set_label_key("label");
    return s;
  }
  absl::StatusOr<std::unique_ptr<ExampleSource>> Open(const std::string& cache_dir = "") const {
    SourceOptions options;
    options.cache_dir = cache_dir;
    return OpenTfRecordSource(Spec(), "train", options);
  }
  std::string Shard(int i, int n) const {
    return (dir_.path() / TfRecordShardName("fm", "train", i, n)).string();
  }
  ScratchDir dir_{"tfrecord_source_test"};
};

TEST_F(TfRecordSourceTest, ReadsEveryRecordAcrossShardsInOrder) {
  WriteTfRecordShards(dir_.path().string(), "fm", "train", Records(10), 3);
  ASSERT_OK_AND_ASSIGN(auto source, Open());
  EXPECT_EQ(source->size(), 10);
  EXPECT_FALSE(source->stored_shape().has_value());
  EXPECT_EQ(source->max_label().label, 6);
  EXPECT_EQ(source->max_label().index, 6);
  StoredExample ex;
  for (int i : {9, 0, 4, 3, 7}) {
    ASSERT_OK(source->Read(i, &ex));
    EXPECT_EQ(ex.kind, StoredExample::Kind::kEncoded);
    EXPECT_EQ(ex.bytes, Records(10)[i].image);
    EXPECT_EQ(ex.label, i % 7);
  }
  // Shards of 3, 3 and 4 records (j * 3 / 10).
  EXPECT_EQ(source->Where(4), absl::StrCat("dataset.path: ", Shard(1, 3), ": record 0"));
  EXPECT_TRUE(fs::exists(IndexPathBeside(Shard(2, 3))));
  EXPECT_THAT(source->Read(10, &ex), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("example 10 is not in [0, 10)")));
}

TEST_F(TfRecordSourceTest, ShardsAreFoundAndCheckedByName) {
  const std::string d = dir_.path().string();
  EXPECT_THAT(FindTfRecordShards(d, "/shown", "fm", "train"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.path: /shown holds no shards of fm-train.tfrecord")));
  EXPECT_THAT(FindTfRecordShards(d + "/nope", "/shown/nope", "fm", "train"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("dataset.path: /shown/nope: no such folder")));
  for (int i : {0, 1, 3}) dir_.Write(TfRecordShardName("fm", "train", i, 4), "");
  dir_.Write(TfRecordShardName("fm", "test", 2, 4), "");  // another split
  dir_.Write(".fm-train.tfrecord-00002-of-00004.lockstep-index", "");
  EXPECT_THAT(FindTfRecordShards(d, "/shown", "fm", "train"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.path: /shown/fm-train.tfrecord-00002-of-00004: missing "
                                 "(3 of 4 shards found)")));
  dir_.Write(TfRecordShardName("fm", "train", 2, 4), "");
  ASSERT_OK_AND_ASSIGN(auto shards, FindTfRecordShards(d, "/shown", "fm", "train"));
  EXPECT_EQ(shards,
            (std::vector<std::string>{
                TfRecordShardName("fm", "train", 0, 4), TfRecordShardName("fm", "train", 1, 4),
                TfRecordShardName("fm", "train", 2, 4), TfRecordShardName("fm", "train", 3, 4)}));
  dir_.Write(TfRecordShardName("fm", "train", 0, 5), "");
  EXPECT_THAT(FindTfRecordShards(d, "/shown", "fm", "train"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("belong to sets of 4 and 5")));
  dir_.Write("fm-test.tfrecord", "");
  EXPECT_THAT(FindTfRecordShards(d, "/shown", "fm", "test2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("holds no shards")));
}

TEST_F(TfRecordSourceTest, ASingleFileSplit) {
  dir_.Write("fm-train.tfrecord", TfRecordShardBytes(Records(3)));
  ASSERT_OK_AND_ASSIGN(auto source, Open());
  EXPECT_EQ(source->size(), 3);
  dir_.Write(TfRecordShardName("fm", "train", 0, 1), "");
  EXPECT_THAT(Open().status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("one split in two layouts")));
}

TEST_F(TfRecordSourceTest, TheIndexIsReusedAndRebuiltWhenItDoesNotFit) {
  WriteTfRecordShards(dir_.path().string(), "fm", "train", Records(5), 1);
  const std::string index = IndexPathBeside(Shard(0, 1));
  ASSERT_OK(Open().status());
  // A stored index is what Open reads: one that lies about a label shows through.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RandomAccessFile> shard,
                       RandomAccessFile::Open(Shard(0, 1)));
  ASSERT_OK_AND_ASSIGN(TfRecordIndex built, BuildTfRecordIndex(*shard, "image", "label"));
  built.labels[2] = 40;
  dir_.Write(fs::path(index).filename(), SerializeTfRecordIndex(built));
  ASSERT_OK_AND_ASSIGN(auto source, Open());
  EXPECT_EQ(source->max_label().label, 40);
  StoredExample ex;
  EXPECT_THAT(source->Read(2, &ex), StatusIs(absl::StatusCode::kDataLoss,
                                             HasSubstr("record 2: label 2, its index says 40")));
  // A corrupt index, or one of a shard since rewritten, is built again.
  std::string bytes = SerializeTfRecordIndex(built);
  bytes[20] ^= 1;
  dir_.Write(fs::path(index).filename(), bytes);
  ASSERT_OK_AND_ASSIGN(source, Open());
  EXPECT_EQ(source->max_label().label, 4);
  dir_.Write(fs::path(index).filename(), SerializeTfRecordIndex(built));
  struct utimbuf times = {1000, 1000};
  ASSERT_EQ(::utime(Shard(0, 1).c_str(), &times), 0);
  ASSERT_OK_AND_ASSIGN(source, Open());
  EXPECT_EQ(source->max_label().label, 4);
}

TEST_F(TfRecordSourceTest, AnIndexThatCannotBeStoredBesideGoesToTheCache) {
  WriteTfRecordShards(dir_.path().string(), "fm", "train", Records(4), 1);
  // A folder where the index file would go: no write there, root or not.
  fs::create_directory(IndexPathBeside(Shard(0, 1)));
  EXPECT_THAT(Open().status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("its offset index cannot be stored"),
                             HasSubstr("the worker has no cache folder for indexes"))));
  const std::string cache = (dir_.path() / "cache" / "indexes").string();
  ASSERT_OK(Open(cache).status());
  EXPECT_TRUE(fs::exists(IndexPathInCache(Shard(0, 1), cache)));
  ASSERT_OK_AND_ASSIGN(auto source, Open(cache));
  EXPECT_EQ(source->size(), 4);
}

// Bad shards fail at Open (the index pass reads every record), naming the shard, the
// record and the reason.
TEST_F(TfRecordSourceTest, BadRecordsFailNamingShardRecordAndReason) {
  const std::string good = TfRecordShardBytes(Records(3));
  const size_t first = good.size() - TfRecordShardBytes({Records(3)[2]}).size();  // record 2
  std::string length = good, data = good;
  length[first] ^= 0x10;
  data[first + 14] ^= 0x01;
  const struct {
    std::string bytes;
    absl::StatusCode code;
    std::string message;
  } bad[] = {
      {good.substr(0, good.size() - 3), absl::StatusCode::kDataLoss,
       absl::StrCat("record 2 (at byte ", first, "): truncated: its length says")},
      {good + std::string(5, '\0'), absl::StatusCode::kDataLoss,
       absl::StrCat("record 3 (at byte ", good.size(), "): truncated: 5 bytes left")},
      {length, absl::StatusCode::kDataLoss,
       "record 2 (at byte " + std::to_string(first) + "): length CRC mismatch"},
      {data, absl::StatusCode::kDataLoss,
       "record 2 (at byte " + std::to_string(first) + "): data CRC mismatch (corrupt data)"},
      {FrameTfRecord(ImageExampleBytes("image", "x", "y", 1)), absl::StatusCode::kInvalidArgument,
       "record 0 (at byte 0): no feature 'label' (it has 'image', 'y')"},
      {FrameTfRecord(ImageExampleBytes("image", "x", "label", -1)),
       absl::StatusCode::kInvalidArgument, "record 0 (at byte 0): label -1 is negative"},
  };
  for (const auto& b : bad) {
    fs::remove(IndexPathBeside(Shard(0, 1)));
    dir_.Write(TfRecordShardName("fm", "train", 0, 1), b.bytes);
    EXPECT_THAT(Open().status(), StatusIs(b.code, AllOf(HasSubstr("dataset.path: " + Shard(0, 1)),
                                                        HasSubstr(b.message))))
        << b.message;
  }
}

// After the index: a record corrupted in place (size and time kept) is DATA_LOSS at its
// read; a shard rewritten under the reader is FAILED_PRECONDITION.
TEST_F(TfRecordSourceTest, ReadsCheckTheCrcAgain) {
  const std::string good = TfRecordShardBytes(Records(3));
  dir_.Write(TfRecordShardName("fm", "train", 0, 1), good);
  ASSERT_OK_AND_ASSIGN(auto source, Open());
  struct stat st;
  ASSERT_EQ(::stat(Shard(0, 1).c_str(), &st), 0);
  std::string bad = good;
  bad[good.size() - 6] ^= 0x40;  // record 2's data
  dir_.Write(TfRecordShardName("fm", "train", 0, 1), bad);
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, Shard(0, 1).c_str(), times, 0), 0);
  StoredExample ex;
  EXPECT_OK(source->Read(1, &ex));
  EXPECT_THAT(source->Read(2, &ex),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr(Shard(0, 1) + ": record 2: data CRC mismatch (corrupt data)")));
  dir_.Write(TfRecordShardName("fm", "train", 0, 1), good.substr(0, 30));
  EXPECT_THAT(source->Read(2, &ex),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("record 2: the shard changed since it was opened")));
}

// Fashion-MNIST as TFDS stores it (PNGs in TFRecord shards) gives the IDX path's floats
// bit for bit, through OpenExampleSource and ImageTransform (300 test images, normalized).
TEST_F(TfRecordSourceTest, FashionMnistAsPngShardsEqualsTheIdxPath) {
  const std::string dir = kDefaultDatasetPath;
  if (!fs::exists(dir + "/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << dir << " is missing (Debian's dataset-fashion-mnist)";
  }
  ASSERT_OK_AND_ASSIGN(Dataset idx, LoadIdxDataset(dir, Split::kTest));
  ASSERT_OK_AND_ASSIGN(IdxArray pixels, ReadIdx(dir + "/t10k-images-idx3-ubyte.gz", 3));
  const int n = 300;
  std::vector<ImageRecord> records;
  for (int i = 0; i < n; ++i) {
    const std::vector<uint8_t> image(pixels.data.begin() + i * 784,
                                     pixels.data.begin() + (i + 1) * 784);
    records.push_back({testing::EncodePng(image, 28, 28, 1), idx.labels[i]});
  }
  WriteTfRecordShards(dir_.path().string(), "fm", "train", records, 3);
  v1::DatasetSpec spec = Spec();
  spec.mutable_normalize()->add_mean(0.2860);
  spec.mutable_normalize()->add_std(0.3530);
  ASSERT_OK(Normalize(spec.normalize(), &idx));
  ASSERT_OK_AND_ASSIGN(auto source, OpenExampleSource(spec, Split::kTrain, {}));
  ASSERT_OK_AND_ASSIGN(auto transform, ImageTransform::Create(spec, Split::kTrain, {28, 28, 1}));
  auto scratch = transform->NewScratch();
  StoredExample stored;
  std::vector<float> out(784);
  int64_t label = 0;
  for (int i = 0; i < n; ++i) {
    ASSERT_OK(
        ReadAndTransform(*source, *transform, i, {}, scratch.get(), &stored, out.data(), &label));
    ASSERT_EQ(label, idx.labels[i]);
    ASSERT_EQ(0, std::memcmp(out.data(), &idx.images[i * 784], 784 * sizeof(float))) << i;
  }
}

}  // namespace
}  // namespace lockstep
