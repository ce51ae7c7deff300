#include "core/data/record_source.h"

#include "core/data/dataset.h"
#include "core/data/idx.h"
#include "core/data/image_transform.h"
#include "core/data/npz_testing.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::lockstep::testing::NpyBytes;
using ::lockstep::testing::RawBytes;
using ::lockstep::testing::ScratchDir;
using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// n images of h x w x c whose pixel (i, y, x, k) is (i * 7 + y * 3 + x + k * 50) % 256.
std::string Pixels(int n, int h, int w, int c) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        for (int k = 0; k < c; ++k) out += static_cast<char>((i * 7 + y * 3 + x + k * 50) % 256);
      }
    }
  }
  return out;
}

class RecordSourceTest : public ::testing::Test {
 protected:
  std::string WriteSplit(const std::string& name, const std::string& images,
                         const std::string& labels) {
    dir_.Write(name + ".labels.npy", labels);
    return dir_.Write(name + ".npy", images);
  }
  ScratchDir dir_{"record_source_test"};
};

TEST_F(RecordSourceTest, ReadsImagesAndLabelsInPlace) {
  const std::string path = WriteSplit("train", NpyBytes("|u1", {3, 4, 5, 3}, Pixels(3, 4, 5, 3)),
                                      NpyBytes("<i8", {3}, RawBytes<int64_t>({2, 7, 0})));
  ASSERT_OK_AND_ASSIGN(auto source, OpenRecordSource(path, "dataset.train_path", nullptr));
  EXPECT_EQ(source->size(), 3);
  ASSERT_TRUE(source->stored_shape().has_value());
  EXPECT_EQ(DimsString(*source->stored_shape()), "[4, 5, 3]");
  EXPECT_EQ(source->max_label().label, 7);
  EXPECT_EQ(source->max_label().index, 1);
  StoredExample ex;
  for (int i : {2, 0, 1}) {
    ASSERT_OK(source->Read(i, &ex));
    EXPECT_EQ(ex.kind, StoredExample::Kind::kRaw);
    EXPECT_EQ(ex.bytes, Pixels(3, 4, 5, 3).substr(i * 60, 60));
    EXPECT_EQ(ex.label, (std::vector<int64_t>{2, 7, 0})[i]);
  }
  EXPECT_EQ(source->Where(1), absl::StrCat("dataset.train_path: ", path, ": image 1"));
  EXPECT_THAT(source->Read(3, &ex),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("image 3 is not in [0, 3)")));
}

TEST_F(RecordSourceTest, LabelsOfAnyIntegerDtype) {
  const std::string path = WriteSplit("u8", NpyBytes("|u1", {2, 1, 1, 1}, "ab"),
                                      NpyBytes(">u2", {2}, RawBytes<uint16_t>({9, 300}, true)));
  ASSERT_OK_AND_ASSIGN(auto source, OpenRecordSource(path, "dataset.test_path", nullptr));
  EXPECT_EQ(source->max_label().label, 300);
}

TEST_F(RecordSourceTest, BadFilesNameTheFieldTheFileAndWhy) {
  const std::string good_labels = NpyBytes("<i4", {2}, RawBytes<int32_t>({0, 1}));
  const struct {
    std::string images, labels;
    absl::StatusCode code;
    std::string message;
  } bad[] = {
      {NpyBytes("<f4", {2, 1, 1, 1}, std::string(8, '\0')), good_labels,
       absl::StatusCode::kInvalidArgument, "dtype float32: records are uint8 pixels"},
      {NpyBytes("|u1", {2, 3, 3}, std::string(18, '\0')), good_labels,
       absl::StatusCode::kInvalidArgument, "shape (2, 3, 3) is not [N, H, W, C] (add a channel"},
      {NpyBytes("|u1", {0, 3, 3, 1}, ""), NpyBytes("<i4", {0}, ""),
       absl::StatusCode::kInvalidArgument, "no images"},
      {NpyBytes("|u1", {2, 3, 3, 1}, std::string(17, '\0')), good_labels,
       absl::StatusCode::kDataLoss, "needs 18 bytes after the header, only 17 follow"},
      {NpyBytes("|u1", {2, 3, 3, 1}, std::string(19, '\0')), good_labels,
       absl::StatusCode::kDataLoss, "needs 18 bytes after the header, but 19 follow"},
      {"not an npy at all", good_labels, absl::StatusCode::kInvalidArgument, "not a .npy array"},
      {NpyBytes("|u1", {2, 1, 1, 1}, "ab"), NpyBytes("<i4", {3}, RawBytes<int32_t>({0, 1, 2})),
       absl::StatusCode::kInvalidArgument, "train.labels.npy: shape (3,): want [2], one label"},
      {NpyBytes("|u1", {2, 1, 1, 1}, "ab"), NpyBytes("<f4", {2}, std::string(8, '\0')),
       absl::StatusCode::kInvalidArgument, "dtype float32: labels must be integers"},
      {NpyBytes("|u1", {2, 1, 1, 1}, "ab"), NpyBytes("<i2", {2}, RawBytes<int16_t>({0, -3})),
       absl::StatusCode::kInvalidArgument, "label -3 at index 1 is negative"},
  };
  for (const auto& b : bad) {
    const std::string path = WriteSplit("train", b.images, b.labels);
    EXPECT_THAT(
        OpenRecordSource(path, "dataset.train_path", nullptr).status(),
        StatusIs(b.code, AllOf(HasSubstr("dataset.train_path: "),
                               HasSubstr(path.substr(0, path.size() - 4)), HasSubstr(b.message))))
        << b.message;
  }
  EXPECT_THAT(
      OpenRecordSource((dir_.path() / "none.npy").string(), "dataset.train_path", nullptr).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("none.npy: no such file")));
  dir_.Write("alone.npy", NpyBytes("|u1", {2, 1, 1, 1}, "ab"));
  EXPECT_THAT(
      OpenRecordSource((dir_.path() / "alone.npy").string(), "dataset.test_path", nullptr).status(),
      StatusIs(
          absl::StatusCode::kFailedPrecondition,
          AllOf(HasSubstr("dataset.test_path: "), HasSubstr("alone.labels.npy: no such file"))));
}

TEST_F(RecordSourceTest, PathsOutsideTheRootsAreRefused) {
  const std::string path = WriteSplit("train", NpyBytes("|u1", {1, 1, 1, 1}, "a"),
                                      NpyBytes("<i4", {1}, RawBytes<int32_t>({0})));
  ASSERT_OK_AND_ASSIGN(DataRoots roots, DataRoots::Parse("/usr/share/datasets"));
  EXPECT_THAT(
      OpenRecordSource(path, "dataset.train_path", &roots).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("dataset.train_path: \"" + path + "\" is outside the data roots")));
}

TEST_F(RecordSourceTest, AFileThatShrinksUnderTheReaderIsAnErrorNotACrash) {
  const std::string path = WriteSplit("train", NpyBytes("|u1", {4, 2, 2, 1}, std::string(16, 'x')),
                                      NpyBytes("<i4", {4}, RawBytes<int32_t>({0, 1, 2, 3})));
  ASSERT_OK_AND_ASSIGN(auto source, OpenRecordSource(path, "dataset.train_path", nullptr));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 8);
  StoredExample ex;
  EXPECT_OK(source->Read(1, &ex));
  EXPECT_THAT(source->Read(3, &ex), StatusIs(absl::StatusCode::kFailedPrecondition,
                                             AllOf(HasSubstr("the file shrank since it was opened"),
                                                   HasSubstr("(image 3)"))));
}

// Fashion-MNIST written as a record file gives the floats that the IDX path gives,
// bit for bit, with and without normalize.
TEST_F(RecordSourceTest, FashionMnistAsRecordsEqualsTheIdxPath) {
  const std::string dir = kDefaultDatasetPath;
  if (!std::filesystem::exists(dir + "/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << dir << " is missing (Debian's dataset-fashion-mnist)";
  }
  ASSERT_OK_AND_ASSIGN(IdxArray images, ReadIdx(dir + "/t10k-images-idx3-ubyte.gz", 3));
  ASSERT_OK_AND_ASSIGN(IdxArray labels, ReadIdx(dir + "/t10k-labels-idx1-ubyte.gz", 1));
  const int n = 500;
  const std::string pixels(images.data.begin(), images.data.begin() + n * 784);
  const std::string label_bytes(labels.data.begin(), labels.data.begin() + n);
  const std::string path = WriteSplit("test", NpyBytes("|u1", {n, 28, 28, 1}, pixels),
                                      NpyBytes("|u1", {n}, label_bytes));
  ASSERT_OK_AND_ASSIGN(auto source, OpenRecordSource(path, "dataset.test_path", nullptr));
  for (bool normalize : {false, true}) {
    v1::DatasetSpec spec;
    spec.set_format("records");
    if (normalize) {
      spec.mutable_normalize()->add_mean(0.2860);
      spec.mutable_normalize()->add_std(0.3530);
    }
    ASSERT_OK_AND_ASSIGN(Dataset idx, LoadIdxDataset(dir, Split::kTest));
    ASSERT_OK(Normalize(spec.normalize(), &idx));
    ASSERT_OK_AND_ASSIGN(auto transform, ImageTransform::Create(spec, Split::kTest, {28, 28, 1}));
    EXPECT_FALSE(transform->random());
    auto scratch = transform->NewScratch();
    StoredExample ex;
    std::vector<float> out(784);
    for (int i = 0; i < n; ++i) {
      ASSERT_OK(source->Read(i, &ex));
      ASSERT_OK(
          transform->Apply(ex, rng::Key{0, static_cast<uint32_t>(i)}, scratch.get(), out.data()));
      ASSERT_EQ(ex.label, idx.labels[i]);
      ASSERT_EQ(0, std::memcmp(out.data(), &idx.images[i * 784], 784 * sizeof(float)))
          << "image " << i << (normalize ? " normalized" : "");
    }
  }
}

}  // namespace
}  // namespace lockstep
