// Token datasets (token_dataset.h): windows of a stream, text files as bytes (the
// fortunes corpus), .npz token arrays, their errors, the spec's checks, and how the RNG
// plan's indices pick and shard windows.
#include "core/data/token_dataset.h"

#include <filesystem>
#include <numeric>
#include <set>

#include "core/data/npz_testing.h"
#include "core/plan.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::NpyBytes;
using testing::RawBytes;
using testing::StatusIs;

// The fortunes package's largest file (245 KB of English quips).
constexpr char kFortunes[] = "/usr/share/games/fortunes/cookie";

std::string TokenNpz(const std::string& npy, const std::string& key = "tokens") {
  testing::ZipWriter z;
  z.Add(key + ".npy", npy, {});
  return z.Finish();
}

TEST(WindowTokensTest, WindowsOverlapByOneTokenAndTargetsShiftByOne) {
  std::vector<int32_t> stream(12);
  std::iota(stream.begin(), stream.end(), 100);  // 100..111
  ASSERT_OK_AND_ASSIGN(Dataset ds, WindowTokens(stream, 4, "dataset.train_path", "s"));
  EXPECT_EQ(ds.size, 2);  // floor((12 - 1) / 4); tokens 108..111 are a partial window
  EXPECT_EQ(ds.row, 4);
  EXPECT_EQ(ds.label_row, 4);
  EXPECT_TRUE(ds.shape.flat);
  EXPECT_EQ(ds.shape.c, 4);
  EXPECT_EQ(ds.images, (std::vector<float>{100, 101, 102, 103, 104, 105, 106, 107}));
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{101, 102, 103, 104, 105, 106, 107, 108}));
  EXPECT_EQ(ds.max_token, 107);
  EXPECT_EQ(ds.labels[ds.max_label_index], 108);
}

TEST(WindowTokensTest, ExactlyOneWindow) {
  const std::vector<int32_t> stream = {1, 2, 3};
  ASSERT_OK_AND_ASSIGN(Dataset ds, WindowTokens(stream, 2, "f", "s"));
  EXPECT_EQ(ds.size, 1);
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{2, 3}));
}

TEST(WindowTokensTest, RefusesShortStreamsAndBadTokens) {
  const std::vector<int32_t> short_stream = {1, 2, 3};
  EXPECT_THAT(WindowTokens(short_stream, 3, "dataset.test_path", "/x.txt").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("dataset.test_path: /x.txt: 3 tokens"),
                             HasSubstr("context + 1 = 4"))));
  const std::vector<int32_t> negative = {1, 2, -5, 3};
  EXPECT_THAT(WindowTokens(negative, 1, "f", "s").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("token -5 is not in [0, 16777216) at offset 2")));
}

TEST(TextDatasetTest, FortunesAsBytes) {
  const std::string text = testing::ReadAll(kFortunes);
  ASSERT_GT(text.size(), 200000u) << "install Debian's fortunes (scripts/install-deps)";
  ASSERT_OK_AND_ASSIGN(Dataset ds, LoadTextDataset(kFortunes, "dataset.train_path", 64));
  EXPECT_EQ(ds.size, static_cast<int64_t>((text.size() - 1) / 64));
  EXPECT_EQ(ds.images_from, kFortunes);
  for (int64_t w : {int64_t{0}, ds.size / 2, ds.size - 1}) {
    for (int t = 0; t < 64; ++t) {
      ASSERT_EQ(ds.images[w * 64 + t], static_cast<unsigned char>(text[w * 64 + t]));
      ASSERT_EQ(ds.labels[w * 64 + t], static_cast<unsigned char>(text[w * 64 + t + 1]));
    }
  }
  EXPECT_LT(ds.max_token, kByteVocabulary);
  EXPECT_GE(ds.max_token, 'z');
}

TEST(TextDatasetTest, ErrorsNameTheFieldAndFile) {
  testing::ScratchDir dir("text_dataset_test");
  EXPECT_THAT(
      LoadTextDataset(dir.path() / "none.txt", "dataset.train_path", 8).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("dataset.train_path"), HasSubstr("none.txt: no such file"))));
  const std::string tiny = dir.Write("tiny.txt", "abc");
  EXPECT_THAT(LoadTextDataset(tiny, "dataset.test_path", 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("dataset.test_path"), HasSubstr("tiny.txt: 3 tokens"))));
  const std::string big = dir.Write("big.txt", std::string(100, 'x'));
  EXPECT_THAT(LoadTextDataset(big, "dataset.train_path", 8, /*max_bytes=*/50).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("100 bytes: over the limit")));
}

TEST(TextDatasetTest, RefusesPathsOutsideTheRoots) {
  testing::ScratchDir dir("text_dataset_roots");
  std::filesystem::create_directories(dir.path() / "root");
  ASSERT_OK_AND_ASSIGN(DataRoots roots, DataRoots::Parse((dir.path() / "root").string()));
  EXPECT_THAT(LoadTextDataset(kFortunes, "dataset.train_path", 8, 1 << 30, roots).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dataset.train_path")));
}

TEST(TokenNpzDatasetTest, StreamAndSequences) {
  testing::ScratchDir dir("token_npz_test");
  const std::vector<int32_t> stream = {5, 6, 7, 8, 9, 10, 11};
  const std::string a = dir.Write("a.npz", TokenNpz(NpyBytes("<i4", {7}, RawBytes(stream))));
  ASSERT_OK_AND_ASSIGN(Dataset s, LoadTokenNpzDataset(a, "dataset.train_path", "tokens", 3));
  EXPECT_EQ(s.size, 2);
  EXPECT_EQ(s.labels, (std::vector<int32_t>{6, 7, 8, 9, 10, 11}));

  const std::vector<int64_t> rows = {1, 2, 3, 4, 50, 60, 70, 80};  // int64 is fine too
  const std::string b =
      dir.Write("b.npz", TokenNpz(NpyBytes("<i8", {2, 4}, RawBytes(rows)), "ids"));
  ASSERT_OK_AND_ASSIGN(Dataset q, LoadTokenNpzDataset(b, "dataset.test_path", "ids", 3));
  EXPECT_EQ(q.size, 2);
  EXPECT_EQ(q.images, (std::vector<float>{1, 2, 3, 50, 60, 70}));
  EXPECT_EQ(q.labels, (std::vector<int32_t>{2, 3, 4, 60, 70, 80}));
  EXPECT_EQ(q.max_token, 70);
}

TEST(TokenNpzDatasetTest, ErrorsNameTheFileArrayAndPosition) {
  testing::ScratchDir dir("token_npz_errors");
  const std::vector<int32_t> rows = {1, 2, 3, 4, 5, 6, -1, 8};
  const std::string bad = dir.Write("bad.npz", TokenNpz(NpyBytes("<i4", {2, 4}, RawBytes(rows))));
  EXPECT_THAT(
      LoadTokenNpzDataset(bad, "dataset.train_path", "tokens", 3).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("dataset.train_path"),
                     HasSubstr("bad.npz: array 'tokens': token -1"), HasSubstr("at [1, 2]"))));
  EXPECT_THAT(LoadTokenNpzDataset(bad, "dataset.train_path", "tokens", 4).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shape (2, 4) is neither a stream [n] nor sequences")));
  EXPECT_THAT(LoadTokenNpzDataset(bad, "dataset.train_path", "ids", 3).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("dataset.train_path"), HasSubstr("tokens"))));
  const std::vector<float> floats = {1, 2, 3, 4};
  const std::string f = dir.Write("f.npz", TokenNpz(NpyBytes("<f4", {4}, RawBytes(floats))));
  EXPECT_THAT(LoadTokenNpzDataset(f, "dataset.test_path", "tokens", 3).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("f.npz: array 'tokens': dtype float32"),
                             HasSubstr("must be integers"))));
  EXPECT_THAT(
      LoadTokenNpzDataset(dir.path() / "none.npz", "dataset.test_path", "tokens", 3).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("dataset.test_path")));
}

v1::DatasetSpec TextSpec() {
  v1::DatasetSpec s;
  s.set_format("text");
  s.set_train_path(kFortunes);
  s.set_test_path("/usr/share/games/fortunes/literature");
  s.set_context(32);
  return s;
}

TEST(TokenDatasetSpecTest, ChecksFieldsAndTheModelsInput) {
  const Dims input{1, 1, 32, true};
  v1::DatasetSpec ok = TextSpec();
  EXPECT_OK(CheckDatasetSpec(&ok, input, {}));

  v1::DatasetSpec no_context = TextSpec();
  no_context.set_context(0);
  EXPECT_THAT(CheckDatasetSpec(&no_context, input, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dataset.context: 0")));
  v1::DatasetSpec wrong = TextSpec();
  EXPECT_THAT(
      CheckDatasetSpec(&wrong, Dims{1, 1, 16, true}, {}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("model.input_shape: [16]"), HasSubstr("input_shape: [32]"))));
  v1::DatasetSpec key = TextSpec();
  key.set_token_key("x");
  EXPECT_THAT(CheckDatasetSpec(&key, input, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.token_key: not read by format text")));
  v1::DatasetSpec norm = TextSpec();
  norm.mutable_normalize()->add_mean(0);
  EXPECT_THAT(CheckDatasetSpec(&norm, input, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dataset.normalize")));
  v1::DatasetSpec missing = TextSpec();
  missing.clear_test_path();
  EXPECT_THAT(CheckDatasetSpec(&missing, input, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dataset.test_path")));
  v1::DatasetSpec tokens = TextSpec();
  tokens.set_format("tokens");
  EXPECT_OK(CheckDatasetSpec(&tokens, input, {}));
  EXPECT_EQ(tokens.token_key(), "tokens");
  v1::DatasetSpec images;
  images.set_context(8);
  EXPECT_THAT(CheckDatasetSpec(&images, Dims{28, 28, 1}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset.context: only for formats text and tokens")));
}

TEST(TokenDatasetSpecTest, LoadDatasetsReadsBothSplits) {
  v1::DatasetSpec spec = TextSpec();
  ASSERT_OK(CheckDatasetSpec(&spec, Dims{1, 1, 32, true}, {}));
  ASSERT_OK_AND_ASSIGN(Datasets d, LoadDatasets(spec));
  EXPECT_GT(d.train.size, 1000);
  EXPECT_GT(d.test.size, 100);
  EXPECT_EQ(d.test.label_row, 32);
  EXPECT_EQ(d.test.field, "dataset.test_path");
  // An image model cannot take it: one prediction per example, not per position.
  EXPECT_THAT(
      CheckDatasetFitsModel(d.train, Dims{1, 1, 32, true}, 256),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("one prediction per position")));
}

// The plan orders windows as it orders images: each replica's shard of a step is the
// windows at its rows of the permutation, and together they are the global batch.
TEST(TokenDatasetPlanTest, ReplicasShareEachStepsWindows) {
  ASSERT_OK_AND_ASSIGN(Dataset ds, LoadTextDataset(kFortunes, "dataset.train_path", 128));
  TrainingPlan plan(0, 0, rng::Impl::kPartitionable, ds.size, 8, 2);
  const StepPlan step = plan.Next();
  ASSERT_OK_AND_ASSIGN(auto shards, ShardBatch(step.indices, 2));
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(shards[0].size(), 4u);
  EXPECT_EQ(shards[1][0], step.indices[4]);
  std::set<int32_t> distinct(step.indices.begin(), step.indices.end());
  EXPECT_EQ(distinct.size(), 8u);
  for (int32_t w : step.indices) ASSERT_LT(w, ds.size);
}

}  // namespace
}  // namespace lockstep
