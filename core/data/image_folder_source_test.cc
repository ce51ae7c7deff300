#include "core/data/image_folder_source.h"

#include <filesystem>

#include "core/testing.h"

namespace lockstep {
namespace {

using ::lockstep::testing::ScratchDir;
using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

class ImageFolderSourceTest : public ::testing::Test {
 protected:
  void File(const std::string& rel, const std::string& bytes = "img") {
    fs::create_directories((dir_.path() / rel).parent_path());
    dir_.Write(rel, bytes);
  }
  v1::DatasetSpec Spec() const {
    v1::DatasetSpec s;
    s.set_format("imagefolder");
    s.set_train_path((dir_.path() / "train").string());
    s.set_test_path((dir_.path() / "val").string());
    return s;
  }
  absl::StatusOr<std::unique_ptr<ExampleSource>> Open(Split split,
                                                      const DataRoots* roots = nullptr) const {
    SourceOptions options;
    options.roots = roots;
    return OpenImageFolderSource(Spec(), split, options);
  }
  std::string Root() const { return dir_.path().string(); }
  ScratchDir dir_{"image_folder_source_test"};
};

// The order and labels of torchvision's ImageFolder: classes sorted, each class's files in
// sorted(os.walk()) order ("dog/sub" before "dog/sub b"), extensions in any case, other
// files ignored.
TEST_F(ImageFolderSourceTest, TorchvisionsOrderAndLabels) {
  for (const char* f :
       {"train/dog/b.jpg", "train/dog/a.PNG", "train/dog/sub/c.jpeg", "train/dog/sub b/d.jpg",
        "train/dog/notes.txt", "train/cat/z.jpg", "train/Zebra/1.png"}) {
    File(f, f);
  }
  ASSERT_OK_AND_ASSIGN(auto source, Open(Split::kTrain));
  // Classes: "Zebra" < "cat" < "dog" (byte order, as Python's sorted).
  const std::vector<std::pair<std::string, int>> want = {
      {"train/Zebra/1.png", 0}, {"train/cat/z.jpg", 1},      {"train/dog/a.PNG", 2},
      {"train/dog/b.jpg", 2},   {"train/dog/sub/c.jpeg", 2}, {"train/dog/sub b/d.jpg", 2}};
  ASSERT_EQ(source->size(), static_cast<int64_t>(want.size()));
  StoredExample ex;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_OK(source->Read(i, &ex));
    EXPECT_EQ(ex.bytes, want[i].first) << i;
    EXPECT_EQ(ex.label, want[i].second) << i;
    EXPECT_EQ(ex.kind, StoredExample::Kind::kEncoded);
    EXPECT_EQ(source->Where(i), "dataset.train_path: " + Root() + "/" + want[i].first);
  }
  EXPECT_EQ(source->max_label().label, 2);
  EXPECT_EQ(source->max_label().index, 5);
}

TEST_F(ImageFolderSourceTest, BadFoldersAreRefusedNamingThem) {
  EXPECT_THAT(Open(Split::kTrain).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("dataset.train_path: " + Root() + "/train: no such folder")));
  File("train/readme.txt");
  EXPECT_THAT(Open(Split::kTrain).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("train: no class folders")));
  File("train/cat/a.jpg");
  File("train/dog/a.txt");
  EXPECT_THAT(Open(Split::kTrain).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("train/dog: no .jpg, .jpeg or .png files (class 1)")));
  File("train/dog/b.BMP");
  EXPECT_THAT(Open(Split::kTrain).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("train/dog/b.BMP: only JPEG and PNG images are read")));
  fs::remove(dir_.path() / "train/dog/b.BMP");
  File("train/dog/b.jpg");
  ASSERT_OK(Open(Split::kTrain).status());
  File("val/cat/a.jpg");
  File("val/cow/a.jpg");
  EXPECT_THAT(Open(Split::kTest).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("dataset.test_path: " + Root() + "/val: its classes differ"),
                             HasSubstr("only here: 'cow'; only in training: 'dog'"))));
  fs::rename(dir_.path() / "val/cow", dir_.path() / "val/dog");
  ASSERT_OK_AND_ASSIGN(auto test, Open(Split::kTest));
  EXPECT_EQ(test->size(), 2);
  // A file deleted after the listing: an error naming it, not a crash.
  fs::remove(dir_.path() / "val/dog/a.jpg");
  StoredExample ex;
  EXPECT_THAT(test->Read(1, &ex), StatusIs(absl::StatusCode::kFailedPrecondition,
                                           HasSubstr("val/dog/a.jpg: no such file")));
}

TEST_F(ImageFolderSourceTest, LinksOutOfTheDataRootsAreRefused) {
  File("train/cat/a.jpg");
  ScratchDir outside("image_folder_outside");
  outside.Write("secret.jpg", "x");
  fs::create_symlink(outside.path() / "secret.jpg", dir_.path() / "train/cat/b.jpg");
  ASSERT_OK_AND_ASSIGN(DataRoots roots, DataRoots::Parse(Root()));
  EXPECT_THAT(Open(Split::kTrain, &roots).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("train/cat/b.jpg\" is outside the data roots")));
  fs::remove(dir_.path() / "train/cat/b.jpg");
  fs::create_directory_symlink(outside.path(), dir_.path() / "train/cat/more");
  EXPECT_THAT(Open(Split::kTrain, &roots).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("train/cat/more\" is outside the data roots")));
  fs::remove(dir_.path() / "train/cat/more");
  ASSERT_OK(Open(Split::kTrain, &roots).status());
}

}  // namespace
}  // namespace lockstep
