// The digests a Lockstep safetensors file keeps of itself: every single byte of a file
// flipped, header and data alike, is refused on read (a data byte naming its tensor), a
// file without digests (another tool's) still reads, and one with half its digests does not.
#include "core/io/safetensors_digest.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/testing.h"

namespace lockstep {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

class SafeTensorsDigestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("st_digest_" + std::to_string(getpid()) + ".safetensors"))
                .string();
    st_.AddF32("params.Dense_0.kernel", {2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
    st_.AddF32("opt_state.mu.Dense_0.kernel", {2, 3}, std::vector<float>{0, -0.5f, 7, 8, 9, 1});
    const int64_t count = 17;
    st_.Add("opt_state.count", "I64", {}, &count, sizeof(count));
    st_.metadata()["step"] = "17";
    st_.metadata()["spec"] = R"({"model":{"kind":"mlp"},"note":"a \"quoted\" value"})";
    ASSERT_OK(st_.Write(path_));
    bytes_ = lockstep::testing::ReadAll(path_);
  }
  void TearDown() override { std::filesystem::remove(path_); }

  void WriteBytes(const std::string& bytes) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
  }
  size_t HeaderEnd() const {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes_[i]);
    return 8 + n;
  }
  // The tensor whose bytes hold file offset `at` (past the header).
  std::string TensorAt(size_t at) const {
    const nlohmann::json header = nlohmann::json::parse(bytes_.substr(8, HeaderEnd() - 8));
    for (const auto& [name, v] : header.items()) {
      if (name == "__metadata__") continue;
      const size_t begin = HeaderEnd() + v["data_offsets"][0].get<size_t>();
      const size_t end = HeaderEnd() + v["data_offsets"][1].get<size_t>();
      if (at >= begin && at < end) return name;
    }
    return "";
  }

  std::string path_, bytes_;
  SafeTensors st_;
};

TEST_F(SafeTensorsDigestTest, AWrittenFileReadsBackDigestedWithoutTheDigestKeys) {
  ASSERT_OK_AND_ASSIGN(SafeTensors back, SafeTensors::Read(path_));
  EXPECT_TRUE(back.digested());
  EXPECT_EQ(back.metadata(), st_.metadata());  // the digests' keys are the reader's
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> count, back.I64("opt_state.count"));
  EXPECT_EQ(count, std::vector<int64_t>{17});
  // Written again from what was read: new digests, which match.
  ASSERT_OK(back.Write(path_));
  ASSERT_OK_AND_ASSIGN(SafeTensors again, SafeTensors::Read(path_));
  EXPECT_TRUE(again.digested());
}

TEST_F(SafeTensorsDigestTest, EveryFlippedByteIsRefusedAndADataByteNamesItsTensor) {
  ASSERT_GT(bytes_.size(), HeaderEnd());
  for (const uint8_t mask : {0x01, 0xfe}) {
    for (size_t at = 0; at < bytes_.size(); ++at) {
      std::string damaged = bytes_;
      damaged[at] = static_cast<char>(damaged[at] ^ mask);
      WriteBytes(damaged);
      const absl::StatusOr<SafeTensors> read = SafeTensors::Read(path_);
      ASSERT_FALSE(read.ok()) << "byte " << at << " ^ " << int{mask} << " went unnoticed";
      if (at >= HeaderEnd()) {
        EXPECT_THAT(read, StatusIs(absl::StatusCode::kDataLoss,
                                   HasSubstr("tensor " + TensorAt(at) + " does not match")))
            << "byte " << at;
      }
    }
  }
}

TEST_F(SafeTensorsDigestTest, TrailingBytesAreRefused) {
  WriteBytes(bytes_ + "x");
  EXPECT_THAT(SafeTensors::Read(path_),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bytes follow the header")));
}

// What Python's safetensors or an older Lockstep writes: no digests at all.
TEST_F(SafeTensorsDigestTest, AFileWithoutDigestsReadsUndigested) {
  nlohmann::json header = nlohmann::json::parse(bytes_.substr(8, HeaderEnd() - 8));
  header["__metadata__"].erase(kTensorDigestsKey);
  header["__metadata__"].erase(kHeaderDigestKey);
  const std::string h = header.dump();
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>(uint64_t{h.size()} >> (8 * i));
  WriteBytes(head + h + bytes_.substr(HeaderEnd()));
  ASSERT_OK_AND_ASSIGN(SafeTensors back, SafeTensors::Read(path_));
  EXPECT_FALSE(back.digested());
  ASSERT_OK_AND_ASSIGN(std::vector<float> v, back.F32("params.Dense_0.kernel"));
  EXPECT_EQ(v[5], 6.0f);

  // One digest key without the other: the other was damaged.
  header["__metadata__"][kTensorDigestsKey] = "{}";
  const std::string h2 = header.dump();
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>(uint64_t{h2.size()} >> (8 * i));
  WriteBytes(head + h2 + bytes_.substr(HeaderEnd()));
  EXPECT_THAT(SafeTensors::Read(path_),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(kHeaderDigestKey)));
}

TEST(Sha256Hex, IsTheStandardDigest) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace lockstep
