#include "core/data/tf_example.h"

#include "core/testing.h"

namespace lockstep {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string Len(int field, const std::string& bytes) {
  return Varint(field << 3 | 2) + Varint(bytes.size()) + bytes;
}
std::string Entry(const std::string& key, const std::string& feature) {
  return Len(1, Len(1, key) + Len(2, feature));
}
std::string Example(const std::string& entries) { return Len(1, entries); }
std::string BytesFeature(const std::vector<std::string>& values) {
  std::string list;
  for (const auto& v : values) list += Len(1, v);
  return Len(1, list);
}
std::string PackedInts(const std::vector<int64_t>& values) {
  std::string packed;
  for (int64_t v : values) packed += Varint(static_cast<uint64_t>(v));
  return Len(3, Len(1, packed));
}

TEST(TfExample, ReadsTheNamedFeatures) {
  const std::string e = ImageExampleBytes("image", "\xff\xd8jpeg", "label", 7);
  absl::string_view image;
  int64_t label = 0;
  ASSERT_OK(ParseImageExample(e, "image", "label", &image, &label));
  EXPECT_EQ(image, "\xff\xd8jpeg");
  EXPECT_EQ(label, 7);
  // Negative labels are 10-byte varints, as protobuf writes int64.
  ASSERT_OK(ParseImageExample(ImageExampleBytes("img", "x", "y", -2), "img", "y", &image, &label));
  EXPECT_EQ(label, -2);
}

TEST(TfExample, WireFormatRulesAsProtobufs) {
  absl::string_view image;
  int64_t label = 0;
  // Unpacked int64s, an unknown field, other features, a later entry replacing an earlier.
  const std::string unpacked = Len(3, Varint(1 << 3 | 0) + Varint(4));
  const std::string e =
      Example(Entry("label", PackedInts({1})) + Entry("image", BytesFeature({"a"})) +
              Entry("file_name", BytesFeature({"x.jpg"})) + Entry("label", unpacked)) +
      Varint(7 << 3 | 0) + Varint(99);
  ASSERT_OK(ParseImageExample(e, "image", "label", &image, &label));
  EXPECT_EQ(image, "a");
  EXPECT_EQ(label, 4);
  // Two Features fields merge.
  const std::string split =
      Example(Entry("image", BytesFeature({"b"}))) + Example(Entry("label", PackedInts({3})));
  ASSERT_OK(ParseImageExample(split, "image", "label", &image, &label));
  EXPECT_EQ(label, 3);
}

TEST(TfExample, BadExamplesSayWhy) {
  absl::string_view image;
  int64_t label;
  const struct {
    std::string bytes, message;
  } bad[] = {
      {Example(Entry("image", BytesFeature({"a"})) + Entry("y", PackedInts({1}))),
       "no feature 'label' (it has 'image', 'y')"},
      {Example(Entry("image", PackedInts({1})) + Entry("label", PackedInts({1}))),
       "feature 'image' is an int64_list, want a bytes_list of one encoded image"},
      {Example(Entry("image", BytesFeature({"a", "b"})) + Entry("label", PackedInts({1}))),
       "feature 'image' holds 2 values, want a bytes_list of one value"},
      {Example(Entry("image", BytesFeature({"a"})) + Entry("label", BytesFeature({"1"}))),
       "feature 'label' is a bytes_list, want an int64_list of one label"},
      {Example(Entry("image", BytesFeature({"a"})) + Entry("label", PackedInts({}))),
       "feature 'label' holds 0 values"},
      {Example(Entry("image", BytesFeature({"a"})) + Entry("label", "")),
       "feature 'label' is empty (no list set)"},
      {"\x0a\x05ab", "malformed protobuf wire format in Example"},
      {"\x0b", "malformed protobuf wire format in Example"},  // a group
      {Len(1, "\x0a\x7f"), "malformed protobuf wire format in Features"},
      {"", "no feature 'image' (it has none)"},
  };
  for (const auto& b : bad) {
    EXPECT_THAT(ParseImageExample(b.bytes, "image", "label", &image, &label),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(b.message)))
        << b.message;
  }
}

}  // namespace
}  // namespace lockstep
