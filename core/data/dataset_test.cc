// Datasets from .npz files (LoadNpzDataset, LoadDatasets), normalization, the dataset
// spec's checks and whether a model fits a dataset. IDX files: idx_test.cc.
#include "core/data/dataset.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>

#include "core/data/npz.h"
#include "core/data/npz_testing.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::NpyBytes;
using testing::NpzBytes;
using testing::RawBytes;
using testing::StatusIs;
namespace fs = std::filesystem;

std::string Uint8Images(int n, int h, int w, int c) {
  std::vector<uint8_t> v(static_cast<size_t>(n) * h * w * c);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 7);
  return NpyBytes("|u1", {n, h, w, c}, RawBytes(v));
}

class NpzDatasetTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& bytes) {
    return dir_.Write(name, bytes);
  }
  absl::StatusOr<Dataset> Load(const std::string& image_npy, const std::string& label_npy) {
    return LoadNpzDataset(Write("train.npz", NpzBytes(image_npy, label_npy)), "dataset.train_path",
                          "image", "label");
  }
  testing::ScratchDir dir_{"npz_dataset_test"};
};

TEST_F(NpzDatasetTest, Uint8ImagesAreScaledAsIdxImagesAre) {
  ASSERT_OK_AND_ASSIGN(Dataset ds, Load(Uint8Images(3, 2, 2, 3),
                                        NpyBytes("<i8", {3}, RawBytes<int64_t>({4, 0, 2}))));
  EXPECT_EQ(ds.size, 3);
  EXPECT_EQ(ds.row, 12);
  EXPECT_EQ(ds.shape.h, 2);
  EXPECT_EQ(ds.shape.c, 3);
  for (size_t i = 0; i < ds.images.size(); ++i) {
    EXPECT_EQ(ds.images[i], static_cast<float>(static_cast<uint8_t>(i * 7)) / 255.0f);
  }
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{4, 0, 2}));
  EXPECT_EQ(ds.max_label_index, 0);
  EXPECT_EQ(ds.field, "dataset.train_path");
  EXPECT_THAT(ds.labels_from, HasSubstr("train.npz: array 'label'"));
}

TEST_F(NpzDatasetTest, Float32ImagesAreTakenAsTheyAreAndLabelsOfEveryIntegerDtypeRead) {
  const std::vector<float> pixels = {-1.5f, 0, 1e30f, 7};
  for (bool big : {false, true}) {
    const std::string images = NpyBytes(big ? ">f4" : "<f4", {4, 1, 1, 1}, RawBytes(pixels, big));
    for (const std::string descr : {"|i1", "|u1", "<i2", ">i2", "<u2", ">u2", "<i4", ">i4", "<u4",
                                    ">u4", "<i8", ">i8", "<u8", ">u8"}) {
      const int size = descr[2] - '0';
      const bool label_big = descr[0] == '>';
      std::string raw;
      for (int v : {1, 0, 3, 2}) {
        std::string one(size, '\0');
        one[label_big ? size - 1 : 0] = static_cast<char>(v);
        raw += one;
      }
      SCOPED_TRACE(descr);
      ASSERT_OK_AND_ASSIGN(Dataset ds, Load(images, NpyBytes(descr, {4}, raw)));
      EXPECT_EQ(ds.images, pixels);
      EXPECT_EQ(ds.labels, (std::vector<int32_t>{1, 0, 3, 2})) << descr;
      EXPECT_EQ(ds.max_label_index, 2) << descr;
    }
  }
}

TEST_F(NpzDatasetTest, OtherKeysAndCompressedFilesRead) {
  const std::string path =
      Write("c.npz", NpzBytes(Uint8Images(2, 1, 1, 1),
                              NpyBytes("|u1", {2}, std::string("\x01\x00", 2)), true, "x", "y"));
  ASSERT_OK_AND_ASSIGN(Dataset ds, LoadNpzDataset(path, "dataset.test_path", "x", "y"));
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{1, 0}));
}

TEST_F(NpzDatasetTest, BadArraysAreNamedWithFileAndArray) {
  const std::string labels2 = NpyBytes("|u1", {2}, std::string(2, '\0'));
  const std::string images2 = Uint8Images(2, 2, 2, 1);
  const struct {
    std::string name, images, labels, expected;
  } cases[] = {
      {"rank 3 images", NpyBytes("|u1", {2, 2, 2}, std::string(8, '\0')), labels2,
       "array 'image': shape (2, 2, 2) is not [N, H, W, C] (add a channel axis"},
      {"float64 images", NpyBytes("<f8", {2, 1, 1, 1}, std::string(16, '\0')), labels2,
       "array 'image': dtype float64: images must be uint8"},
      {"int16 images", NpyBytes("<i2", {2, 1, 1, 1}, std::string(4, '\0')), labels2,
       "array 'image': dtype int16"},
      {"no images", NpyBytes("|u1", {0, 2, 2, 1}, ""), NpyBytes("|u1", {0}, ""),
       "shape (0, 2, 2, 1): no images"},
      {"empty image", NpyBytes("|u1", {2, 0, 2, 1}, ""), labels2, "an empty or oversized image"},
      {"rank 2 labels", images2, NpyBytes("|u1", {2, 1}, std::string(2, '\0')),
       "array 'label': shape (2, 1) is not [N] (flatten it"},
      {"float labels", images2, NpyBytes("<f4", {2}, std::string(8, '\0')),
       "array 'label': dtype float32: labels must be integers"},
      {"bool labels", images2, NpyBytes("|b1", {2}, std::string(2, '\0')),
       "array 'label': dtype bool"},
      {"counts", images2, NpyBytes("|u1", {3}, std::string(3, '\0')),
       "train.npz: 2 images in 'image' but 3 labels in 'label'"},
      {"negative label", images2, NpyBytes("|i1", {2}, "\x01\xff"),
       "array 'label': label -1 at index 1 is negative"},
      {"huge label", images2, NpyBytes("<i8", {2}, RawBytes<int64_t>({0, int64_t{1} << 40})),
       "label 1099511627776 at index 1 does not fit an int32"},
      {"NaN pixel", NpyBytes("<f4", {2, 1, 2, 2}, RawBytes<float>({0, 0, 0, 0, 0, 0, NAN, 0})),
       labels2, "array 'image': image 1 has nan at [0, 1, 0] (h, w, c)"},
      {"infinite pixel",
       NpyBytes("<f4", {2, 1, 1, 1}, RawBytes<float>({0, -std::numeric_limits<float>::infinity()})),
       labels2, "image 1 has -inf"},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(Load(c.images, c.labels),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("dataset.train_path: "), HasSubstr("train.npz"),
                               HasSubstr(c.expected))))
        << c.name;
  }
}

TEST_F(NpzDatasetTest, MissingFilesArraysAndCorruptFilesAreNamed) {
  EXPECT_THAT(
      LoadNpzDataset((dir_.path() / "none.npz").string(), "dataset.train_path", "image", "label"),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("dataset.train_path: "), HasSubstr("none.npz: no such file"))));
  const std::string path = Write(
      "k.npz",
      NpzBytes(Uint8Images(1, 1, 1, 1), NpyBytes("|u1", {1}, "a"), false, "pixels", "targets"));
  EXPECT_THAT(LoadNpzDataset(path, "dataset.test_path", "image", "targets"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("dataset.test_path: "), HasSubstr("k.npz: no array 'image'"),
                             HasSubstr("'pixels', 'targets'"))));
  const std::string whole = NpzBytes(Uint8Images(1, 1, 1, 1), NpyBytes("|u1", {1}, "a"));
  EXPECT_THAT(LoadNpzDataset(Write("cut.npz", whole.substr(0, whole.size() - 30)),
                             "dataset.train_path", "image", "label"),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("dataset.train_path: "), HasSubstr("cut.npz"))));
}

TEST_F(NpzDatasetTest, DataRootsAreRespected) {
  ASSERT_OK_AND_ASSIGN(DataRoots roots, DataRoots::Parse((dir_.path() / "root").string()));
  fs::create_directories(dir_.path() / "root");
  const std::string inside = (dir_.path() / "root" / "a.npz").string();
  testing::WriteFile(inside, NpzBytes(Uint8Images(1, 1, 1, 1), NpyBytes("|u1", {1}, "\x02")));
  ASSERT_OK(LoadNpzDataset(inside, "dataset.train_path", "image", "label", 1 << 20, roots));
  const std::string outside = Write("b.npz", testing::ReadAll(inside));
  fs::create_symlink(outside, dir_.path() / "root" / "link.npz");
  for (const std::string& p : {outside, (dir_.path() / "root" / "link.npz").string(),
                               (dir_.path() / "root" / ".." / "b.npz").string()}) {
    EXPECT_THAT(LoadNpzDataset(p, "dataset.train_path", "image", "label", 1 << 20, roots),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("dataset.train_path: \"" + p + "\" is outside the data roots")));
  }
}

v1::DatasetSpec NpzSpec(const std::string& train, const std::string& test) {
  v1::DatasetSpec s;
  s.set_format("npz");
  s.set_train_path(train);
  s.set_test_path(test);
  s.set_image_key("image");
  s.set_label_key("label");
  return s;
}

TEST_F(NpzDatasetTest, LoadDatasetsNormalizesPerChannelInFloat32) {
  v1::DatasetSpec spec = NpzSpec(
      Write("train.npz",
            NpzBytes(Uint8Images(2, 2, 1, 2), NpyBytes("|u1", {2}, std::string("\x01\x00", 2)))),
      Write("test.npz", NpzBytes(Uint8Images(1, 2, 1, 2), NpyBytes("|u1", {1}, "\x01"))));
  ASSERT_OK_AND_ASSIGN(Datasets plain, LoadDatasets(spec));
  spec.mutable_normalize()->add_mean(0.2860);
  spec.mutable_normalize()->add_mean(-1);
  spec.mutable_normalize()->add_std(0.3530);
  spec.mutable_normalize()->add_std(0.5);
  ASSERT_OK_AND_ASSIGN(Datasets norm, LoadDatasets(spec));
  ASSERT_EQ(norm.train.images.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    const float expected = i % 2 == 0 ? (plain.train.images[i] - 0.2860f) / 0.3530f
                                      : (plain.train.images[i] - -1.0f) / 0.5f;
    EXPECT_EQ(norm.train.images[i], expected) << i;  // bit for bit: float32 throughout
  }
  EXPECT_EQ(norm.test.images[1], (plain.test.images[1] + 1.0f) / 0.5f);
  spec.mutable_normalize()->add_mean(0);
  spec.mutable_normalize()->add_std(1);
  EXPECT_THAT(LoadDatasets(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("dataset.normalize: 3 means and 3 stds for "
                                                     "images of 2 channels")));
}

TEST_F(NpzDatasetTest, NormalizationIsBitForBitWhatNumpyComputesInFloat32) {
  // core/data/testdata/make_npz: numpy's (x.astype(float32) / float32(255) - mean) / std.
  const std::string path = testing::SourcePath("core/data/testdata/normalized.npz");
  v1::DatasetSpec spec = NpzSpec(path, path);
  for (double m : {0.1, 0.7}) spec.mutable_normalize()->add_mean(m);
  for (double s : {0.3, 0.25}) spec.mutable_normalize()->add_std(s);
  ASSERT_OK_AND_ASSIGN(Datasets d, LoadDatasets(spec));
  ASSERT_OK_AND_ASSIGN(auto npz, NpzFile::Open(path));
  ASSERT_OK_AND_ASSIGN(NpyArray expected, npz->Read("expected"));
  ASSERT_EQ(expected.count(), 120);
  ASSERT_EQ(d.train.images.size(), 120u);
  for (int64_t i = 0; i < 120; ++i) {
    EXPECT_EQ(d.train.images[i], expected.Float32At(i)) << i;
  }
  EXPECT_EQ(d.test.images, d.train.images);
}

TEST_F(NpzDatasetTest, TrainAndTestImagesMustHaveOneShape) {
  const v1::DatasetSpec spec =
      NpzSpec(Write("train.npz", NpzBytes(Uint8Images(1, 2, 2, 1), NpyBytes("|u1", {1}, "\x01"))),
              Write("test.npz", NpzBytes(Uint8Images(1, 2, 2, 3), NpyBytes("|u1", {1}, "\x01"))));
  EXPECT_THAT(
      LoadDatasets(spec),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("dataset.test_path: "), HasSubstr("test.npz: array 'image'"),
                     HasSubstr("images are 2x2x3, the training split's"), HasSubstr("2x2x1"))));
}

TEST_F(NpzDatasetTest, TheModelMustFitTheImagesAndLabels) {
  ASSERT_OK_AND_ASSIGN(Dataset ds, Load(Uint8Images(3, 28, 28, 1),
                                        NpyBytes("|u1", {3}, std::string("\x02\x0c\x05", 3))));
  EXPECT_THAT(CheckDatasetFitsModel(ds, {28, 28, 1}, 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("dataset.train_path: "), HasSubstr("array 'label'"),
                             HasSubstr("label 12 at index 1 is not in [0, 10)"))));
  EXPECT_OK(CheckDatasetFitsModel(ds, {28, 28, 1}, 13));
  EXPECT_THAT(CheckDatasetFitsModel(ds, {32, 32, 3}, 13),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("array 'image'"),
                             HasSubstr("images are 28x28x1 (HxWxC), the model takes 32x32x3"))));
}

TEST(DatasetSpec, DefaultsAndChecks) {
  const Dims input{28, 28, 1};
  v1::DatasetSpec idx;
  ASSERT_OK(CheckDatasetSpec(&idx, input, {}));
  EXPECT_EQ(idx.format(), "idx");
  EXPECT_EQ(idx.path(), kDefaultDatasetPath);
  v1::DatasetSpec npz;
  npz.set_format("npz");
  npz.set_train_path("/data/a.npz");
  npz.set_test_path("/data/b.npz");
  ASSERT_OK(CheckDatasetSpec(&npz, input, {}));
  EXPECT_EQ(npz.image_key(), "image");
  EXPECT_EQ(npz.label_key(), "label");

  ASSERT_OK_AND_ASSIGN(DataRoots roots, DataRoots::Parse("/data"));
  const struct {
    std::string field;
    std::function<void(v1::DatasetSpec*)> edit;
  } bad[] = {
      {"dataset.format: unknown format \"csv\"", [](auto* s) { s->set_format("csv"); }},
      {"dataset.path: format npz reads", [](auto* s) { s->set_path("/data/x"); }},
      {"dataset.train_path: required", [](auto* s) { s->clear_train_path(); }},
      {"dataset.test_path: required", [](auto* s) { s->clear_test_path(); }},
      {"dataset.train_path: \"/etc/a.npz\" is outside the data roots",
       [](auto* s) { s->set_train_path("/etc/a.npz"); }},
      {"dataset.test_path: \"../b.npz\" is outside", [](auto* s) { s->set_test_path("../b.npz"); }},
      {"dataset.label_key: \"x\" is also dataset.image_key",
       [](auto* s) {
         s->set_image_key("x");
         s->set_label_key("x");
       }},
      {"dataset.image_key: longer than", [](auto* s) { s->set_image_key(std::string(300, 'k')); }},
      {"dataset.normalize: mean has 1 values and std 0",
       [](auto* s) { s->mutable_normalize()->add_mean(0.5); }},
      {"dataset.normalize.mean: 3 values for the model's 1 input channels",
       [](auto* s) {
         for (int i = 0; i < 3; ++i) s->mutable_normalize()->add_mean(0.5);
         for (int i = 0; i < 3; ++i) s->mutable_normalize()->add_std(0.5);
       }},
      {"dataset.normalize.std[0]: 0 is not a positive",
       [](auto* s) {
         s->mutable_normalize()->add_mean(0.5);
         s->mutable_normalize()->add_std(0);
       }},
      {"dataset.normalize.std[0]: 1e-300 is not a positive",
       [](auto* s) {
         s->mutable_normalize()->add_mean(0.5);
         s->mutable_normalize()->add_std(1e-300);
       }},
      {"dataset.normalize.mean[0]: inf",
       [](auto* s) {
         s->mutable_normalize()->add_mean(INFINITY);
         s->mutable_normalize()->add_std(1);
       }},
  };
  for (const auto& b : bad) {
    v1::DatasetSpec s = npz;
    b.edit(&s);
    EXPECT_THAT(CheckDatasetSpec(&s, input, roots),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(b.field)))
        << b.field;
  }
  v1::DatasetSpec idx_with_npz_fields;
  idx_with_npz_fields.set_train_path("/data/a.npz");
  EXPECT_THAT(CheckDatasetSpec(&idx_with_npz_fields, input, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.train_path: only for format npz")));
}

}  // namespace
}  // namespace lockstep
