#include "core/io/safetensors.h"

#include <filesystem>
#include <fstream>

#include "core/testing.h"

namespace lockstep {
namespace {

TEST(SafeTensors, RoundTrip) {
  const std::string path = std::filesystem::temp_directory_path() / "st_roundtrip.safetensors";
  SafeTensors st;
  std::vector<float> v = {1.5f, -2.0f, 3.25f};
  st.AddF32("params.Dense_0.bias", {3}, v);
  st.metadata()["step"] = "7";
  ASSERT_OK(st.Write(path));
  ASSERT_OK_AND_ASSIGN(SafeTensors back, SafeTensors::Read(path));
  ASSERT_OK_AND_ASSIGN(std::vector<float> got, back.F32("params.Dense_0.bias"));
  EXPECT_EQ(got, v);
  EXPECT_EQ(back.metadata().at("step"), "7");
  EXPECT_THAT(back.F32("missing"),
              testing::StatusIs(absl::StatusCode::kNotFound, ::testing::HasSubstr("missing")));
  EXPECT_THAT(back.U8("params.Dense_0.bias"),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("F32")));
  std::filesystem::remove(path);
}

TEST(SafeTensors, TruncatedFileIsDataLoss) {
  const std::string path = std::filesystem::temp_directory_path() / "st_trunc.safetensors";
  std::ofstream(path, std::ios::binary) << std::string("\x40\0\0\0\0\0\0\0{", 9);
  EXPECT_THAT(SafeTensors::Read(path),
              testing::StatusIs(absl::StatusCode::kDataLoss, ::testing::HasSubstr(path)));
  std::filesystem::remove(path);
}

TEST(SafeTensors, EmptyTensorsReadBack) {
  const std::string path = std::filesystem::temp_directory_path() / "st_empty.safetensors";
  SafeTensors st;
  st.AddF32("empty", {0, 3}, {});
  ASSERT_OK(st.Write(path));
  ASSERT_OK_AND_ASSIGN(SafeTensors back, SafeTensors::Read(path));
  ASSERT_OK_AND_ASSIGN(std::vector<float> got, back.F32("empty"));
  EXPECT_TRUE(got.empty());
  std::filesystem::remove(path);
}

// An end offset past 2^64 - base once wrapped to a small number and passed the check.
TEST(SafeTensors, OffsetsThatWrapOrAreNotIntegersAreDataLoss) {
  const std::string path = std::filesystem::temp_directory_path() / "st_offsets.safetensors";
  for (const std::string offsets :
       {"[1,18446744073709551615]", "[1,18446744073709551616]", "[0,2.0]", "[0]"}) {
    const std::string header =
        R"({"t":{"dtype":"U8","shape":[9223372036854775807,2],"data_offsets":)" + offsets + "}}";
    std::string bytes(8, '\0');
    bytes[0] = static_cast<char>(header.size());
    std::ofstream(path, std::ios::binary) << bytes << header << "abcd";
    EXPECT_THAT(
        SafeTensors::Read(path),
        testing::StatusIs(absl::StatusCode::kDataLoss, ::testing::HasSubstr("bad data_offsets")))
        << offsets;
  }
  std::filesystem::remove(path);
}

// A header whose shape claims more elements than 64 bits count, or a negative dimension.
TEST(SafeTensors, ShapesThatWrapOrAreNegativeAreInvalid) {
  const std::string path = std::filesystem::temp_directory_path() / "st_shape.safetensors";
  for (const std::string header :
       {R"({"t":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})",
        R"({"t":{"dtype":"U8","shape":[-1,-1],"data_offsets":[0,1]}})",
        // Not integers: converting them was undefined behaviour (UBSan, safetensors_fuzz).
        R"({"t":{"dtype":"U8","shape":[1.8e19],"data_offsets":[0,1]}})",
        R"({"t":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,1]}})",
        R"({"t":{"dtype":"U8","shape":["1"],"data_offsets":[0,1]}})"}) {
    std::string bytes(8, '\0');
    bytes[0] = static_cast<char>(header.size());
    std::ofstream(path, std::ios::binary) << bytes << header << 'x';
    EXPECT_THAT(SafeTensors::Read(path), testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                           ::testing::HasSubstr("bad shape")))
        << header;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace lockstep
