// Bad data through the whole read path a worker runs (OpenExampleSource, then
// ReadAndTransform), on files the test writes: each fails with the file, the record and
// the reason, and the right code; nothing crashes, nothing is skipped.
#include <filesystem>

#include "core/data/dataset.h"
#include "core/data/image_testing.h"
#include "core/data/image_transform.h"
#include "core/data/npz_testing.h"
#include "core/data/tfrecord_testing.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::lockstep::testing::EncodeJpeg;
using ::lockstep::testing::EncodePng;
using ::lockstep::testing::ImageRecord;
using ::lockstep::testing::ScratchDir;
using ::lockstep::testing::StatusIs;
using ::lockstep::testing::TestPixels;
using ::lockstep::testing::WriteTfRecordShards;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct Pipeline {
  std::unique_ptr<ExampleSource> source;
  std::unique_ptr<ImageTransform> transform;
  absl::Status Run(int64_t index) {
    auto scratch = transform->NewScratch();
    StoredExample stored;
    std::vector<float> out(transform->output_shape().size());
    int64_t label = 0;
    return ReadAndTransform(*source, *transform, index, rng::Key{1, 2}, scratch.get(), &stored,
                            out.data(), &label);
  }
};

absl::StatusOr<Pipeline> Open(v1::DatasetSpec spec, Dims input) {
  RETURN_IF_ERROR(CheckDatasetSpec(&spec, input, {}));
  Pipeline p;
  ASSIGN_OR_RETURN(p.source, OpenExampleSource(spec, Split::kTrain, {}));
  ASSIGN_OR_RETURN(p.transform, ImageTransform::Create(spec, Split::kTrain, input));
  return p;
}

TEST(BadInput, TfRecordImagesNameShardRecordAndReason) {
  ScratchDir dir("bad_input_test");
  const std::vector<uint8_t> px = TestPixels(28, 28, 1);
  const std::string jpeg = EncodeJpeg(px, 28, 28, 1);
  std::vector<ImageRecord> records = {{jpeg, 0},
                                      {EncodePng(px, 28, 28, 1), 1},
                                      {jpeg.substr(0, jpeg.size() - 10), 2},
                                      {EncodePng(TestPixels(28, 28, 2), 28, 28, 1, true), 3},
                                      {EncodePng(TestPixels(20, 20, 1), 20, 20, 1), 4},
                                      {"not an image", 5}};
  const std::string shard = WriteTfRecordShards(dir.path().string(), "fm", "train", records, 1)[0];
  v1::DatasetSpec spec;
  spec.set_format("tfrecord");
  spec.set_path(dir.path().string());
  spec.set_name("fm");
  ASSERT_OK_AND_ASSIGN(Pipeline p, Open(spec, {28, 28, 1}));
  ASSERT_OK(p.Run(0));
  ASSERT_OK(p.Run(1));
  const std::string where = "dataset.path: " + shard + ": record ";
  EXPECT_THAT(p.Run(2),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(where + "2: truncated JPEG")));
  EXPECT_THAT(p.Run(3),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(where + "3: a 16-bit PNG")));
  EXPECT_THAT(p.Run(4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(where + "4: the image is 20x20, the model takes 28x28")));
  EXPECT_THAT(p.Run(5), StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr(where + "5: not a JPEG or PNG image (12 bytes")));
  // The labels the model's classes are checked against at job start: the largest, where.
  EXPECT_EQ(p.source->max_label().label, 5);
  EXPECT_EQ(p.source->Where(p.source->max_label().index), where + "5");
}

TEST(BadInput, ImageFolderFilesNameThemselves) {
  ScratchDir dir("bad_input_test");
  std::filesystem::create_directories(dir.path() / "train" / "a");
  dir.Write("train/a/good.png", EncodePng(TestPixels(40, 30, 3), 40, 30, 3));
  dir.Write("train/a/small.png", EncodePng(TestPixels(20, 10, 3), 20, 10, 3));
  dir.Write("train/a/zcmyk.jpg", EncodeJpeg(TestPixels(40, 40, 4), 40, 40, 4));
  v1::DatasetSpec spec;
  spec.set_format("imagefolder");
  spec.set_train_path((dir.path() / "train").string());
  spec.set_test_path((dir.path() / "test").string());
  v1::Preprocess* crop = spec.add_preprocess();
  crop->mutable_random_crop()->set_size(24);
  ASSERT_OK_AND_ASSIGN(Pipeline p, Open(spec, {24, 24, 3}));
  ASSERT_OK(p.Run(0));
  const std::string where = "dataset.train_path: " + (dir.path() / "train").string() + "/a/";
  EXPECT_THAT(p.Run(1), StatusIs(absl::StatusCode::kInvalidArgument,
                                 AllOf(HasSubstr(where + "small.png: a 20x10 image"),
                                       HasSubstr("dataset.preprocess[0].random_crop needs at "
                                                 "least 24x24"))));
  EXPECT_THAT(p.Run(2), StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr(where + "zcmyk.jpg: a CMYK JPEG")));
  std::filesystem::remove(dir.path() / "train" / "a" / "good.png");
  EXPECT_THAT(p.Run(0), StatusIs(absl::StatusCode::kFailedPrecondition,
                                 HasSubstr(where + "good.png: no such file")));
}

// What a job checks as a worker opens a split: labels against the model's classes, and a
// record file's one image shape through the steps.
TEST(BadInput, SplitsThatDoNotFitTheModelFailAtOpen) {
  ScratchDir dir("bad_input_test");
  const std::vector<uint8_t> px = TestPixels(28, 28, 1);
  const std::string shard =
      WriteTfRecordShards(dir.path().string(), "fm", "train",
                          {{EncodePng(px, 28, 28, 1), 3}, {EncodePng(px, 28, 28, 1), 12}}, 1)[0];
  v1::DatasetSpec spec;
  spec.set_format("tfrecord");
  spec.set_path(dir.path().string());
  spec.set_name("fm");
  ASSERT_OK_AND_ASSIGN(Pipeline p, Open(spec, {28, 28, 1}));
  EXPECT_THAT(CheckSplitFitsModel(*p.source, *p.transform, 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.path: " + shard +
                                 ": record 1: label 12 is not in [0, 10): the model's last layer "
                                 "has 10 outputs")));
  EXPECT_OK(CheckSplitFitsModel(*p.source, *p.transform, 13));

  const std::string images =
      dir.Write("r.npy", testing::NpyBytes("|u1", {2, 30, 30, 1}, std::string(2 * 900, '\7')));
  dir.Write("r.labels.npy", testing::NpyBytes("|u1", {2}, std::string("\1\2", 2)));
  v1::DatasetSpec records;
  records.set_format("records");
  records.set_train_path(images);
  records.set_test_path(images + ".test.npy");
  ASSERT_OK_AND_ASSIGN(Pipeline r, Open(records, {28, 28, 1}));
  EXPECT_THAT(CheckSplitFitsModel(*r.source, *r.transform, 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.train_path: " + images +
                                 ": image 0: the image is 30x30, the model takes 28x28")));
  records.add_preprocess()->mutable_center_crop()->set_size(28);
  ASSERT_OK_AND_ASSIGN(r, Open(records, {28, 28, 1}));
  EXPECT_OK(CheckSplitFitsModel(*r.source, *r.transform, 10));
}

}  // namespace
}  // namespace lockstep
