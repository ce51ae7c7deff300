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

}  // namespace
}  // namespace lockstep
