#include "core/data/idx.h"

#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/data/dataset.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;
namespace fs = std::filesystem;

std::string Header(uint32_t magic, std::vector<uint32_t> dims) {
  std::string s;
  auto be = [&](uint32_t v) {
    for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>(v >> (8 * i)));
  };
  be(magic);
  for (uint32_t d : dims) be(d);
  return s;
}

class IdxTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& bytes, bool gz = false) {
    if (!gz) return dir_.Write(name, bytes);
    const std::string path = (dir_.path() / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return path;
  }
  std::string Images(uint32_t n) {
    return Header(0x803, {n, 28, 28}) + std::string(n * 784, '\x80');
  }
  std::string Labels(uint32_t n) { return Header(0x801, {n}) + std::string(n, '\x03'); }
  testing::ScratchDir dir_{"idx_test"};
};

TEST_F(IdxTest, ReadsPlainAndGzip) {
  ASSERT_OK_AND_ASSIGN(IdxArray a, ReadIdx(Write("a", Images(2)), 3));
  EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 28, 28}));
  ASSERT_OK_AND_ASSIGN(IdxArray b, ReadIdx(Write("b.gz", Labels(5), true), 1));
  EXPECT_EQ(b.data, std::vector<uint8_t>(5, 3));
}

TEST_F(IdxTest, MissingFileNamesIt) {
  const std::string p = (dir_.path() / "nope").string();
  EXPECT_THAT(ReadIdx(p, 3), StatusIs(absl::StatusCode::kNotFound, HasSubstr(p)));
}

TEST_F(IdxTest, TruncatedNamesFile) {
  const std::string p = Write("t", Images(2).substr(0, 16 + 784 + 10));
  EXPECT_THAT(ReadIdx(p, 3), StatusIs(absl::StatusCode::kDataLoss,
                                      ::testing::AllOf(HasSubstr(p), HasSubstr("truncated"))));
  const std::string q = Write("h", std::string("\0\0\x08", 3));
  EXPECT_THAT(ReadIdx(q, 3), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(q)));
}

TEST_F(IdxTest, WrongMagicNamesFile) {
  const std::string p = Write("m", Header(0x801, {2, 28, 28}) + std::string(2 * 784, 0));
  EXPECT_THAT(ReadIdx(p, 3), StatusIs(absl::StatusCode::kInvalidArgument,
                                      ::testing::AllOf(HasSubstr(p), HasSubstr("magic"))));
}

TEST_F(IdxTest, OversizedHeaderAndTrailingBytes) {
  const std::string p = Write("o", Header(0x803, {100000000, 28, 28}));
  EXPECT_THAT(ReadIdx(p, 3, 1 << 20), StatusIs(absl::StatusCode::kInvalidArgument,
                                               ::testing::AllOf(HasSubstr(p), HasSubstr("limit"))));
  const std::string q = Write("x", Images(1) + "junk");
  EXPECT_THAT(ReadIdx(q, 3), StatusIs(absl::StatusCode::kDataLoss,
                                      ::testing::AllOf(HasSubstr(q), HasSubstr("after"))));
}

TEST_F(IdxTest, NoSizeLimitButAHeaderThatLiesCostsOnlyWhatTheFileHolds) {
  // 3 x 2^30 images of 1x1 (3 GiB, over the 2 GiB the reader once capped at) declared by
  // a file that holds 10 bytes: truncated, found without allocating 3 GiB; plain and gzip.
  for (bool gz : {false, true}) {
    const std::string p =
        Write(gz ? "big.gz" : "big", Header(0x803, {3u << 30, 1, 1}) + "0123456789", gz);
    EXPECT_THAT(ReadIdx(p, 3),
                StatusIs(absl::StatusCode::kDataLoss,
                         ::testing::AllOf(
                             HasSubstr(p),
                             HasSubstr("header declares 3221225472 bytes of data, file has 10"))));
  }
  // Dimensions whose product passes 2^64.
  const std::string q = Write("overflow", Header(0x803, {0xffffffffu, 0xffffffffu, 0xffffffffu}));
  EXPECT_THAT(ReadIdx(q, 3), StatusIs(absl::StatusCode::kInvalidArgument,
                                      ::testing::AllOf(HasSubstr(q), HasSubstr("more than"))));
}

TEST_F(IdxTest, DatasetCountMismatchNamesBothFiles) {
  Write("train-images-idx3-ubyte", Images(3));
  Write("train-labels-idx1-ubyte.gz", Labels(2), true);
  EXPECT_THAT(LoadIdxDataset(dir_.path().string(), Split::kTrain),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("train-images-idx3-ubyte"),
                                        HasSubstr("train-labels-idx1-ubyte.gz"))));
}

TEST_F(IdxTest, DatasetMissingIsFailedPrecondition) {
  EXPECT_THAT(LoadIdxDataset(dir_.path().string(), Split::kTest),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("t10k-images")));
}

TEST_F(IdxTest, DatasetScalesPixels) {
  Write("t10k-images-idx3-ubyte", Images(2));
  Write("t10k-labels-idx1-ubyte", Labels(2));
  ASSERT_OK_AND_ASSIGN(Dataset ds, LoadIdxDataset(dir_.path().string(), Split::kTest));
  EXPECT_EQ(ds.size, 2);
  EXPECT_FLOAT_EQ(ds.images[0], 128.0f / 255.0f);
  EXPECT_EQ(ds.labels[1], 3);
}

}  // namespace
}  // namespace lockstep
