#include "core/data/streamed_spec.h"

#include <functional>

#include "core/data/dataset.h"
#include "core/data/example_source.h"
#include "core/testing.h"
#include "google/protobuf/util/json_util.h"

namespace lockstep {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

v1::Preprocess Step(const std::string& json) {
  v1::Preprocess p;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &p).ok()) << json;
  return p;
}

v1::DatasetSpec Records() {
  v1::DatasetSpec s;
  s.set_format("records");
  s.set_train_path("/data/r/train.npy");
  s.set_test_path("/data/r/test.npy");
  return s;
}

TEST(StreamedSpec, FormatsAreStreamed) {
  for (const char* f : {"tfrecord", "imagefolder", "records"}) EXPECT_TRUE(IsStreamedFormat(f));
  for (const char* f : {"idx", "npz", "text", "tokens", ""}) EXPECT_FALSE(IsStreamedFormat(f));
}

TEST(StreamedSpec, TfRecordDefaults) {
  v1::DatasetSpec s;
  s.set_format("tfrecord");
  s.set_path("/data/fashion_mnist/3.0.1");
  s.set_name("fashion_mnist");
  ASSERT_OK(CheckDatasetSpec(&s, {28, 28, 1}, {}));
  EXPECT_EQ(s.train_split(), "train");
  EXPECT_EQ(s.test_split(), "test");
  EXPECT_EQ(s.image_key(), "image");
  EXPECT_EQ(s.label_key(), "label");
}

TEST(StreamedSpec, ARecipeThatEndsInTheModelsInput) {
  v1::DatasetSpec s;
  s.set_format("imagefolder");
  s.set_train_path("/data/imagenet/train");
  s.set_test_path("/data/imagenet/val");
  *s.add_preprocess() = Step(R"({"random_resized_crop": {"size": 224}})");
  *s.add_preprocess() = Step(R"({"horizontal_flip": {}})");
  *s.add_test_preprocess() = Step(R"({"resize": {"shorter_side": 256}})");
  *s.add_test_preprocess() = Step(R"({"center_crop": {"height": 224, "width": 224}})");
  for (int i = 0; i < 3; ++i) s.mutable_normalize()->add_mean(0.5);
  for (int i = 0; i < 3; ++i) s.mutable_normalize()->add_std(0.25);
  ASSERT_OK_AND_ASSIGN(DataRoots roots, DataRoots::Parse("/data"));
  ASSERT_OK(CheckDatasetSpec(&s, {224, 224, 3}, roots));
  const ResizedCropRanges r = RangesOf(s.preprocess(0).random_resized_crop());
  EXPECT_EQ(r.scale_min, 0.08);
  EXPECT_EQ(r.ratio_max, 4.0 / 3.0);
  EXPECT_EQ(FlipProbability(s.preprocess(1).horizontal_flip()), 0.5);
  // A resize after the last crop leaves the size to the image: accepted, checked per image.
  *s.add_preprocess() = Step(R"({"resize": {"shorter_side": 100}})");
  EXPECT_FALSE(FixedOutputSize(s.preprocess()).has_value());
  EXPECT_OK(CheckDatasetSpec(&s, {224, 224, 3}, roots));
}

TEST(StreamedSpec, RecordLabelsLieBesideTheImages) {
  EXPECT_EQ(RecordLabelsPath("/data/r/train.npy"), "/data/r/train.labels.npy");
}

TEST(StreamedSpec, BadSpecsNameTheField) {
  ASSERT_OK_AND_ASSIGN(DataRoots roots, DataRoots::Parse("/data"));
  const Dims input{32, 32, 3};
  const struct {
    std::string message;
    std::function<void(v1::DatasetSpec*)> edit;
    Dims input = {32, 32, 3};
  } bad[] = {
      {"dataset.train_path: required", [](auto* s) { s->clear_train_path(); }},
      {"dataset.test_path: \"/etc/x.npy\" is outside the data roots",
       [](auto* s) { s->set_test_path("/etc/x.npy"); }},
      {"dataset.train_path: \"/data/r/train.bin\" is not a .npy file",
       [](auto* s) { s->set_train_path("/data/r/train.bin"); }},
      {"dataset.test_path: \"/data/r/train.npy\" is also dataset.train_path",
       [](auto* s) { s->set_test_path("/data/r/train.npy"); }},
      {"dataset.path: format records reads dataset.train_path",
       [](auto* s) { s->set_path("/data/r"); }},
      {"dataset.image_key: format records reads", [](auto* s) { s->set_image_key("x"); }},
      {"dataset.train_split: format records reads", [](auto* s) { s->set_train_split("x"); }},
      {"dataset.context: only for formats text and tokens", [](auto* s) { s->set_context(3); }},
      {"dataset.preprocess[0]: set one of resize", [](auto* s) { s->add_preprocess(); }},
      {"dataset.preprocess[0].center_crop: set either size (a square) or both height and width",
       [](auto* s) { *s->add_preprocess() = Step(R"({"center_crop": {"height": 3}})"); }},
      {"dataset.preprocess[0].center_crop: set either size",
       [](auto* s) {
         *s->add_preprocess() = Step(R"({"center_crop": {"size": 3, "height": 3, "width": 3}})");
       }},
      {"dataset.preprocess[0].resize.shorter_side: 0 is not in [1, 16384]",
       [](auto* s) { *s->add_preprocess() = Step(R"({"resize": {}})"); }},
      {"dataset.preprocess[0].random_crop: 20000x20000 is over 16384",
       [](auto* s) { *s->add_preprocess() = Step(R"({"random_crop": {"size": 20000}})"); }},
      {"dataset.preprocess[0].random_crop.padding: 5000 is over 4096",
       [](auto* s) {
         *s->add_preprocess() = Step(R"({"random_crop": {"size": 32, "padding": 5000}})");
       }},
      {"dataset.preprocess[0].random_resized_crop.scale: [0.5, 0.1] is not a range",
       [](auto* s) {
         *s->add_preprocess() =
             Step(R"({"random_resized_crop": {"size": 32, "scale": [0.5, 0.1]}})");
       }},
      {"dataset.preprocess[0].random_resized_crop.scale: 1 values",
       [](auto* s) {
         *s->add_preprocess() = Step(R"({"random_resized_crop": {"size": 32, "scale": [0.5]}})");
       }},
      {"dataset.preprocess[0].random_resized_crop.ratio: [0, 1] is not a range",
       [](auto* s) {
         *s->add_preprocess() = Step(R"({"random_resized_crop": {"size": 32, "ratio": [0, 1]}})");
       }},
      {"dataset.preprocess[0].horizontal_flip.probability: 1.5 is not in [0, 1]",
       [](auto* s) {
         *s->add_preprocess() = Step(R"({"horizontal_flip": {"probability": 1.5}})");
       }},
      {"dataset.test_preprocess[0]: a random step: the test split takes resize and center_crop",
       [](auto* s) { *s->add_test_preprocess() = Step(R"({"horizontal_flip": {}})"); }},
      {"dataset.preprocess: the steps end in 24x24 images, but the model takes [32, 32, 3]",
       [](auto* s) { *s->add_preprocess() = Step(R"({"center_crop": {"size": 24}})"); }},
      {"dataset.test_preprocess: the steps end in 24x20 images",
       [](auto* s) {
         *s->add_test_preprocess() = Step(R"({"center_crop": {"height": 24, "width": 20}})");
       }},
      {"model.input_shape: [3072]: format records gives images", [](auto*) {},
       Dims{1, 1, 3072, true}},
      {"dataset.normalize.mean: 1 values for the model's 3 input channels",
       [](auto* s) {
         s->mutable_normalize()->add_mean(0.5);
         s->mutable_normalize()->add_std(0.5);
       }},
  };
  for (const auto& b : bad) {
    v1::DatasetSpec s = Records();
    b.edit(&s);
    EXPECT_THAT(CheckDatasetSpec(&s, b.input, roots),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(b.message)))
        << b.message;
  }
  v1::DatasetSpec ok = Records();
  EXPECT_OK(CheckDatasetSpec(&ok, input, roots));
}

TEST(StreamedSpec, TfRecordAndImageFolderFields) {
  const Dims input{28, 28, 1};
  v1::DatasetSpec t;
  t.set_format("tfrecord");
  t.set_path("/data/fm");
  EXPECT_THAT(CheckDatasetSpec(&t, input, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dataset.name: required")));
  t.set_name("fm");
  t.set_train_path("/data/x");
  EXPECT_THAT(CheckDatasetSpec(&t, input, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.train_path: format tfrecord reads dataset.path")));
  t.clear_train_path();
  t.set_test_split("train");
  EXPECT_THAT(CheckDatasetSpec(&t, input, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.test_split: \"train\" is also dataset.train_split")));
  t.set_test_split("a/b");
  EXPECT_THAT(CheckDatasetSpec(&t, input, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.test_split: \"a/b\" holds a '/'")));
  t.set_test_split("test");
  EXPECT_THAT(CheckDatasetSpec(&t, {28, 28, 2}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("decodes images to 1 channel (gray) or 3 (RGB)")));

  v1::DatasetSpec f;
  f.set_format("imagefolder");
  f.set_train_path("/data/train");
  EXPECT_THAT(CheckDatasetSpec(&f, input, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.test_path: required: format imagefolder reads")));
}

TEST(StreamedSpec, OtherFormatsRefuseTheStreamedFields) {
  v1::DatasetSpec idx;
  *idx.add_preprocess() = Step(R"({"horizontal_flip": {}})");
  EXPECT_THAT(CheckDatasetSpec(&idx, {28, 28, 1}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.preprocess: not read by format idx")));
  v1::DatasetSpec npz;
  npz.set_format("npz");
  npz.set_test_split("x");
  EXPECT_THAT(CheckDatasetSpec(&npz, {28, 28, 1}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.test_split: not read by format npz")));
}

}  // namespace
}  // namespace lockstep
