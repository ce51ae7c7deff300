#include "core/data/npy.h"

#include "core/data/npz_testing.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::NpyBytes;
using testing::RawBytes;
using testing::StatusIs;

TEST(Npy, ReadsShapeDtypeAndData) {
  ASSERT_OK_AND_ASSIGN(NpyArray a,
                       ParseNpy(NpyBytes("<f4", {2, 3}, RawBytes<float>({1, 2, 3, 4, 5, 6})), "a"));
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.kind, 'f');
  EXPECT_EQ(a.item_size, 4);
  EXPECT_EQ(a.count(), 6);
  EXPECT_EQ(a.Float32At(5), 6.0f);
  EXPECT_EQ(a.DtypeName(), "float32");
  EXPECT_EQ(a.ShapeString(), "(2, 3)");
}

TEST(Npy, ReadsEveryIntegerWidthAndByteOrder) {
  ASSERT_OK_AND_ASSIGN(NpyArray i1, ParseNpy(NpyBytes("|i1", {2}, RawBytes<int8_t>({-3, 7})), "a"));
  EXPECT_EQ(i1.IntAt(0), -3);
  ASSERT_OK_AND_ASSIGN(NpyArray i2,
                       ParseNpy(NpyBytes(">i2", {2}, RawBytes<int16_t>({-300, 5}, true)), "a"));
  EXPECT_EQ(i2.IntAt(0), -300);
  EXPECT_EQ(i2.DtypeName(), "int16 (big-endian)");
  ASSERT_OK_AND_ASSIGN(NpyArray u4,
                       ParseNpy(NpyBytes("<u4", {1}, RawBytes<uint32_t>({4000000000u})), "a"));
  EXPECT_EQ(u4.IntAt(0), 4000000000);
  ASSERT_OK_AND_ASSIGN(
      NpyArray i8,
      ParseNpy(NpyBytes(">i8", {1}, RawBytes<int64_t>({-(int64_t{1} << 40)}, true)), "a"));
  EXPECT_EQ(i8.IntAt(0), -(int64_t{1} << 40));
  ASSERT_OK_AND_ASSIGN(NpyArray u8,
                       ParseNpy(NpyBytes("<u8", {1}, RawBytes<uint64_t>({~uint64_t{0}})), "a"));
  EXPECT_EQ(u8.IntAt(0), INT64_MAX);  // saturated
  ASSERT_OK_AND_ASSIGN(NpyArray f,
                       ParseNpy(NpyBytes(">f4", {1}, RawBytes<float>({-2.5f}, true)), "a"));
  EXPECT_EQ(f.Float32At(0), -2.5f);
}

TEST(Npy, ScalarsEmptyArraysAndVersionTwoHeaders) {
  ASSERT_OK_AND_ASSIGN(NpyArray s, ParseNpy(NpyBytes("<f4", {}, RawBytes<float>({1})), "a"));
  EXPECT_EQ(s.count(), 1);
  EXPECT_EQ(s.ShapeString(), "()");
  ASSERT_OK_AND_ASSIGN(NpyArray e, ParseNpy(NpyBytes("|u1", {0, 5}, ""), "a"));
  EXPECT_EQ(e.count(), 0);
  // Version 2.0: a 4-byte header length.
  std::string v1 = NpyBytes("|u1", {3}, "abc");
  std::string v2 = "\x93NUMPY\x02";
  v2 += '\0';
  v2 += v1.substr(8, 2);
  v2 += std::string(2, '\0');
  v2 += v1.substr(10);
  ASSERT_OK_AND_ASSIGN(NpyArray b, ParseNpy(v2, "a"));
  EXPECT_EQ(b.data, "abc");
}

TEST(Npy, RefusesWhatNumpyWouldNotWriteNamingTheArray) {
  const std::string ok = NpyBytes("|u1", {3}, "abc");
  auto bad_header = [&](const std::string& header) {
    std::string h = header;
    std::string out = "\x93NUMPY\x01";
    out += '\0';
    out += static_cast<char>(h.size());
    out += '\0';
    return ParseNpy(out + h + "abc", "f.npz: array 'x'");
  };
  EXPECT_THAT(ParseNpy("hello world", "f: array 'x'"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("f: array 'x': not a .npy")));
  EXPECT_THAT(ParseNpy(std::string("\x93NUMPY\x07\x00\x10\x00", 10), "a"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version 7")));
  for (const char* h :
       {"{'descr': '|u1', 'fortran_order': False}", "{'descr': '|u1', 'shape': (3)}",
        "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), 'extra': 1}",
        "{'descr': '|u1', 'descr': '|u1', 'fortran_order': False, 'shape': (3,)}",
        "{'descr': '|u1', 'fortran_order': Maybe, 'shape': (3,)}",
        "{'descr': '|u1', 'fortran_order': False, 'shape': (3,)} x",
        "{'descr': '|u1', 'fortran_order': False, 'shape': (-3,)}", "[1, 2]", ""}) {
    EXPECT_THAT(bad_header(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("f.npz: array 'x': the .npy header")))
        << h;
  }
  EXPECT_THAT(bad_header("{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (3,)}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("structured")));
  for (const char* descr : {"|O", "<U5", "|S3", "<M8", "<i16", "|f4", "<x4"}) {
    EXPECT_THAT(ParseNpy(NpyBytes(descr, {0}, ""), "a"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("dtype '", descr, "' is not supported"))));
  }
  EXPECT_THAT(ParseNpy(NpyBytes("|u1", {3}, "abc", /*fortran_order=*/true), "f: array 'x'"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("f: array 'x'"), HasSubstr("fortran_order"))));
}

TEST(Npy, DataMustBeExactlyWhatTheShapeNeeds) {
  EXPECT_THAT(
      ParseNpy(NpyBytes("<f4", {2, 2}, RawBytes<float>({1, 2, 3})), "a"),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr("shape (2, 2) of float32 needs 16 bytes after the header, only 12")));
  EXPECT_THAT(ParseNpy(NpyBytes("|u1", {2}, "abc"), "a"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("but 3 follow")));
  std::string cut = NpyBytes("|u1", {2}, "ab");
  EXPECT_THAT(ParseNpy(cut.substr(0, 20), "a"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
}

TEST(Npy, ShapesOverTheLimitAreRefusedBeforeAnyArithmeticOverflows) {
  EXPECT_THAT(ParseNpy(NpyBytes("<f4", {1000, 1000}, ""), "a", 1 << 20),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than 1048576 bytes")));
  EXPECT_THAT(ParseNpy(NpyBytes("<f8", {999999999999999999, 999999999999999999, 10}, ""), "a"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("(the limit)")));
  // A zero anywhere makes it empty, whatever the other dimensions say.
  ASSERT_OK(ParseNpy(NpyBytes("<f8", {999999999999999999, 0}, ""), "a"));
}

}  // namespace
}  // namespace lockstep
