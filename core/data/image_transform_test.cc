#include "core/data/image_transform.h"

#include "core/testing.h"
#include "google/protobuf/util/json_util.h"

namespace lockstep {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

v1::DatasetSpec Spec(const std::string& json) {
  v1::DatasetSpec s;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &s).ok()) << json;
  return s;
}

// An h x w x c raw example whose pixel (y, x, k) is y * 16 + x + k * 100 (mod 256).
StoredExample Raw(int h, int w, int c) {
  StoredExample ex;
  ex.kind = StoredExample::Kind::kRaw;
  ex.shape = {h, w, c};
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int k = 0; k < c; ++k) ex.bytes += static_cast<char>((y * 16 + x + k * 100) % 256);
    }
  }
  return ex;
}

// The transform's output as pixel values again (x * 255, exact for the 1/255 scaling).
std::vector<int> Transformed(const v1::DatasetSpec& spec, Dims out, const StoredExample& ex,
                             rng::Key key = {0, 0}) {
  auto t = ImageTransform::Create(spec, Split::kTrain, out);
  EXPECT_TRUE(t.ok()) << t.status();
  auto scratch = (*t)->NewScratch();
  std::vector<float> f(out.size());
  EXPECT_OK((*t)->Apply(ex, key, scratch.get(), f.data()));
  std::vector<int> px(f.size());
  for (size_t i = 0; i < f.size(); ++i) px[i] = static_cast<int>(std::lround(f[i] * 255));
  return px;
}

TEST(ImageTransform, ScalesAndNormalizesAsDatasetNormalize) {
  const v1::DatasetSpec spec =
      Spec(R"({"format": "records", "normalize": {"mean": [0.5, 0.25], "std": [0.2, 0.3]}})");
  ASSERT_OK_AND_ASSIGN(auto t, ImageTransform::Create(spec, Split::kTrain, {2, 3, 2}));
  const StoredExample ex = Raw(2, 3, 2);
  std::vector<float> out(12);
  auto scratch = t->NewScratch();
  ASSERT_OK(t->Apply(ex, {}, scratch.get(), out.data()));
  for (int i = 0; i < 12; ++i) {
    const float x = static_cast<float>(static_cast<uint8_t>(ex.bytes[i])) / 255.0f;
    const float want = i % 2 == 0 ? (x - 0.5f) / 0.2f : (x - 0.25f) / 0.3f;
    EXPECT_EQ(out[i], want) << i;
  }
}

TEST(ImageTransform, CenterCropRoundsHalfToEvenAsTorchvision) {
  // (7 - 4) / 2 = 1.5 -> 2; (6 - 3) / 2 = 1.5 -> 2; (8 - 3) / 2 = 2.5 -> 2.
  const v1::DatasetSpec spec =
      Spec(R"({"format": "records", "preprocess": [{"center_crop": {"height": 4, "width": 3}}]})");
  EXPECT_EQ(Transformed(spec, {4, 3, 1}, Raw(7, 6, 1)),
            (std::vector<int>{34, 35, 36, 50, 51, 52, 66, 67, 68, 82, 83, 84}));
  EXPECT_EQ(Transformed(spec, {4, 3, 1}, Raw(8, 8, 1))[0], 2 * 16 + 2);
}

TEST(ImageTransform, FlipWithCertaintyMirrors) {
  const v1::DatasetSpec spec =
      Spec(R"({"format": "records", "preprocess": [{"horizontal_flip": {"probability": 1}}]})");
  EXPECT_EQ(Transformed(spec, {1, 3, 2}, Raw(1, 3, 2)), (std::vector<int>{2, 102, 1, 101, 0, 100}));
  const v1::DatasetSpec never =
      Spec(R"({"format": "records", "preprocess": [{"horizontal_flip": {"probability": 0}}]})");
  EXPECT_EQ(Transformed(never, {1, 3, 2}, Raw(1, 3, 2)),
            (std::vector<int>{0, 100, 1, 101, 2, 102}));
}

TEST(ImageTransform, RandomCropPadsWithZeros) {
  const v1::DatasetSpec spec =
      Spec(R"({"format": "records", "preprocess": [{"random_crop": {"size": 4, "padding": 2}}]})");
  const StoredExample ex = Raw(4, 4, 1);
  int padded = 0;
  for (uint32_t i = 0; i < 50; ++i) {
    const std::vector<int> px = Transformed(spec, {4, 4, 1}, ex, {1, i});
    // Every output pixel is 0 (padding) or an input pixel of its row and column shifted
    // by one offset for the whole window.
    int dy = -100, dx = -100;
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < 4; ++x) {
        const int v = px[y * 4 + x];
        if (v == 0 && !(y + dy == 0 && x + dx == 0)) continue;
        if (dy == -100) dy = v / 16 - y, dx = v % 16 - x;
        ASSERT_EQ(v, (y + dy) * 16 + x + dx) << i;
      }
    }
    padded += px[0] == 0;
  }
  EXPECT_GT(padded, 10);
}

TEST(ImageTransform, ImagesTheRecipeCannotUseAreRefused) {
  const v1::DatasetSpec crop =
      Spec(R"({"format": "records", "preprocess": [{"center_crop": {"size": 5}}]})");
  ASSERT_OK_AND_ASSIGN(auto t, ImageTransform::Create(crop, Split::kTrain, {5, 5, 1}));
  auto scratch = t->NewScratch();
  std::vector<float> out(25);
  EXPECT_THAT(
      t->Apply(Raw(4, 9, 1), {}, scratch.get(), out.data()),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("a 4x9 image: dataset.preprocess[0].center_crop needs at least 5x5")));
  EXPECT_THAT(t->Apply(Raw(5, 5, 3), {}, scratch.get(), out.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the image has 3 channels, the model takes 1")));
  StoredExample short_bytes = Raw(5, 5, 1);
  short_bytes.bytes.pop_back();
  EXPECT_THAT(t->Apply(short_bytes, {}, scratch.get(), out.data()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("24 bytes for a [5, 5, 1] image")));

  ASSERT_OK_AND_ASSIGN(auto plain, ImageTransform::Create(Spec(R"({"format": "records"})"),
                                                          Split::kTrain, {5, 5, 1}));
  EXPECT_THAT(plain->Apply(Raw(6, 5, 1), {}, scratch.get(), out.data()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the image is 6x5, the model takes 5x5 (model.input_shape [5, 5, "
                                 "1]): add resize and crop steps")));
  EXPECT_THAT(ImageTransform::Create(crop, Split::kTrain, {6, 6, 1}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.preprocess: the steps end in 5x5 images")));
}

TEST(ImageTransform, TestSplitTakesTestPreprocess) {
  const v1::DatasetSpec spec = Spec(
      R"({"format": "records", "preprocess": [{"random_crop": {"size": 2}}],
          "test_preprocess": [{"center_crop": {"size": 2}}]})");
  ASSERT_OK_AND_ASSIGN(auto train, ImageTransform::Create(spec, Split::kTrain, {2, 2, 1}));
  ASSERT_OK_AND_ASSIGN(auto test, ImageTransform::Create(spec, Split::kTest, {2, 2, 1}));
  EXPECT_TRUE(train->random());
  EXPECT_FALSE(test->random());
}

}  // namespace
}  // namespace lockstep
