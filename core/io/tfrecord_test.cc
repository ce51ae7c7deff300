#include "core/io/tfrecord.h"

#include <string>

#include "absl/strings/escaping.h"
#include "core/testing.h"
#include "tensorboard/event.pb.h"

namespace lockstep::testing {
namespace {

// RFC 3720, appendix B.4, and the classic check value.
TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) {
    up.push_back(static_cast<char>(i));
    down.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(down), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c(""), 0u);
}

// 1003 bytes (i * 7 + 3) % 256: the 8-byte loop and a 3-byte tail (bitwise CRC in Python).
TEST(Crc32c, LongInputs) {
  std::string b;
  for (int i = 0; i < 1003; ++i) b.push_back(static_cast<char>((i * 7 + 3) % 256));
  EXPECT_EQ(Crc32c(b), 0x42881e11u);
}

TEST(TfRecordHeader, ParsedOnlyWithItsCrc) {
  const std::string framed = FrameTfRecord("hello");
  uint64_t length = 0;
  ASSERT_TRUE(ParseTfRecordHeader(framed, &length));
  EXPECT_EQ(length, 5u);
  EXPECT_TRUE(TfRecordDataCrcMatches("hello", std::string_view(framed).substr(17)));
  EXPECT_FALSE(TfRecordDataCrcMatches("hellp", std::string_view(framed).substr(17)));
  std::string bad = framed;
  bad[0] = 6;
  EXPECT_FALSE(ParseTfRecordHeader(bad, &length));
  EXPECT_FALSE(ParseTfRecordHeader(framed.substr(0, 11), &length));
}

// The masked values as TensorBoard's own reader computes them
// (tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c).
TEST(Crc32c, MaskedAsTensorBoardComputesIt) {
  EXPECT_EQ(MaskCrc32c(Crc32c("")), 0xa282ead8u);
  EXPECT_EQ(MaskCrc32c(Crc32c("123456789")), 0xc78ab0e5u);
  EXPECT_EQ(MaskCrc32c(Crc32c(std::string(8, '\0'))), 0x07980329u);
}

// A whole record, byte for byte as TensorBoard's Python writes the same event.
TEST(FrameTfRecord, FileVersionEventAsTensorBoardFramesIt) {
  lockstep::tensorboard::Event event;
  event.set_wall_time(1.5);
  event.set_file_version("brain.Event:2");
  const std::string data = event.SerializeAsString();
  EXPECT_EQ(absl::BytesToHexString(data), "09000000000000f83f1a0d627261696e2e4576656e743a32");
  EXPECT_EQ(absl::BytesToHexString(FrameTfRecord(data)),
            "1800000000000000a37f4b22"
            "09000000000000f83f1a0d627261696e2e4576656e743a32"
            "2a28646c");
}

TEST(FrameTfRecord, EmptyRecord) {
  const std::string framed = FrameTfRecord("");
  ASSERT_EQ(framed.size(), 16u);
  EXPECT_EQ(framed.substr(0, 8), std::string(8, '\0'));
  EXPECT_EQ(absl::BytesToHexString(framed.substr(8)), "29039807d8ea82a2");  // little-endian
}

}  // namespace
}  // namespace lockstep::testing
