#include "core/data/image_decoder.h"

#include "absl/strings/escaping.h"
#include "core/data/image_testing.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::lockstep::testing::EncodeJpeg;
using ::lockstep::testing::EncodePng;
using ::lockstep::testing::StatusIs;
using ::lockstep::testing::TestPixels;
using ::testing::HasSubstr;

struct Decoded {
  absl::Status status;
  std::vector<uint8_t> pixels;
  int h = 0, w = 0;
};

Decoded Decode(const std::string& bytes, int channels) {
  static ImageDecoder decoder;  // reused across images, as a worker thread's
  Decoded d;
  d.status = decoder.Decode(bytes, channels, &d.pixels, &d.h, &d.w);
  return d;
}

TEST(ImageDecoder, PngsDecodeExactly) {
  const std::vector<uint8_t> rgb = TestPixels(5, 7, 3), gray = TestPixels(5, 7, 1);
  Decoded d = Decode(EncodePng(rgb, 5, 7, 3), 3);
  ASSERT_OK(d.status);
  EXPECT_EQ(d.h, 5);
  EXPECT_EQ(d.w, 7);
  EXPECT_EQ(d.pixels, rgb);
  d = Decode(EncodePng(gray, 5, 7, 1), 1);
  ASSERT_OK(d.status);
  EXPECT_EQ(d.pixels, gray);
  // Gray into 3 channels repeats it; alpha is dropped.
  d = Decode(EncodePng(gray, 5, 7, 1), 3);
  ASSERT_OK(d.status);
  for (int i = 0; i < 35; ++i) {
    ASSERT_EQ(d.pixels[3 * i], gray[i]);
    ASSERT_EQ(d.pixels[3 * i + 2], gray[i]);
  }
  const std::vector<uint8_t> rgba = TestPixels(5, 7, 4);
  d = Decode(EncodePng(rgba, 5, 7, 4), 3);
  ASSERT_OK(d.status);
  for (int i = 0; i < 35; ++i) {
    for (int k = 0; k < 3; ++k) ASSERT_EQ(d.pixels[3 * i + k], rgba[4 * i + k]);
  }
  const std::vector<uint8_t> ga = TestPixels(5, 7, 2);
  d = Decode(EncodePng(ga, 5, 7, 2), 1);
  ASSERT_OK(d.status);
  for (int i = 0; i < 35; ++i) ASSERT_EQ(d.pixels[i], ga[2 * i]);
}

TEST(ImageDecoder, JpegsDecode) {
  const std::vector<uint8_t> rgb = TestPixels(33, 47, 3), gray = TestPixels(33, 47, 1);
  Decoded d = Decode(EncodeJpeg(rgb, 33, 47, 3, 95, false), 3);
  ASSERT_OK(d.status);
  EXPECT_EQ(d.h, 33);
  EXPECT_EQ(d.w, 47);
  double error = 0;
  for (size_t i = 0; i < rgb.size(); ++i) error += std::abs(d.pixels[i] - rgb[i]);
  EXPECT_LT(error / rgb.size(), 3);  // lossy, but this image
  const Decoded g1 = Decode(EncodeJpeg(gray, 33, 47, 1), 1);
  const Decoded g3 = Decode(EncodeJpeg(gray, 33, 47, 1), 3);
  ASSERT_OK(g1.status);
  ASSERT_OK(g3.status);
  for (int i = 0; i < 33 * 47; ++i) {
    ASSERT_EQ(g3.pixels[3 * i], g1.pixels[i]);
    ASSERT_EQ(g3.pixels[3 * i + 1], g1.pixels[i]);
  }
}

// A region decode gives the full decode's pixels in its box, for any box, 4:2:0 and
// 4:4:4, color and gray; and it refuses a file truncated below the box as a full decode does.
TEST(ImageDecoder, RegionsAreTheFullDecodesPixels) {
  ImageDecoder decoder;
  uint32_t seed = 1;
  const auto next = [&](int n) {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<int>((seed >> 8) % n);
  };
  for (const auto& [channels, subsample] :
       {std::pair(3, true), std::pair(3, false), std::pair(1, true)}) {
    const int h = 75, w = 101;
    const std::string jpeg = EncodeJpeg(TestPixels(h, w, channels), h, w, channels, 85, subsample);
    int fh = 0, fw = 0, rh = 0, rw = 0;
    std::vector<uint8_t> full, region;
    ASSERT_OK(decoder.Decode(jpeg, channels, &full, &fh, &fw));
    ASSERT_OK(decoder.ReadSize(jpeg, &rh, &rw));
    EXPECT_EQ(rh, h);
    EXPECT_EQ(rw, w);
    for (int k = 0; k < 60; ++k) {
      const int bh = 1 + next(h), bw = 1 + next(w);
      const CropBox box{next(h - bh + 1), next(w - bw + 1), bh, bw};
      ASSERT_OK_AND_ASSIGN(ImageView v, decoder.DecodeRegion(jpeg, channels, box, &region));
      ASSERT_EQ(v.height, bh);
      ASSERT_EQ(v.width, bw);
      for (int y = 0; y < bh; ++y) {
        for (int x = 0; x < bw; ++x) {
          for (int c = 0; c < channels; ++c) {
            ASSERT_EQ(v.at(y, x)[c], full[((box.top + y) * w + box.left + x) * channels + c])
                << "box " << box.top << "," << box.left << " " << bh << "x" << bw;
          }
        }
      }
    }
    EXPECT_THAT(
        decoder.DecodeRegion(jpeg.substr(0, jpeg.size() - 40), channels, {0, 0, 8, 8}, &region)
            .status(),
        StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated JPEG")));
  }
}

// An image decodes the same whatever the decoder decoded before: libjpeg keeps a
// stream's tables for the next, so each image gets a new decompressor (image_fuzz found a
// progressive JPEG without Huffman tables that failed only after another image).
TEST(ImageDecoder, NoImageDependsOnThePreviousOne) {
  std::string regress;
  ASSERT_TRUE(absl::Base64Unescape(
      "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAoHBwgHBgoICAgLCgoLDhgQDg0NDh0VFhEYIx8lJCIfIiEmKzcvJik0"
      "KSEiMEExNDk7Pj4+JUlELkM8SDc9Pjv/wgALCAAMAAoBAREA/8QAFQABAQAAAAAAAAAAAAAAAAAABQL/2gAIAQEAAA"
      "AAAAAAAAAAEHGB/9oACAEBAAE/ECZyGV4//9k=",
      &regress));
  std::vector<std::string> images = {regress};
  for (int q : {20, 60, 97}) {
    images.push_back(EncodeJpeg(TestPixels(9, 13, 3, q), 9, 13, 3, q));
    images.push_back(EncodeJpeg(TestPixels(12, 10, 1, q), 12, 10, 1, q));
  }
  for (const std::string& before : images) {
    for (const std::string& image : images) {
      ImageDecoder used, fresh;
      std::vector<uint8_t> a, b;
      int h, w;
      (void)used.Decode(before, 3, &a, &h, &w);
      const absl::Status s = used.Decode(image, 3, &a, &h, &w);
      EXPECT_EQ(s, fresh.Decode(image, 3, &b, &h, &w));
      if (s.ok()) {
        EXPECT_EQ(a, b);
      }
    }
  }
}

TEST(ImageDecoder, RefusesWhatItCannotDecodeFaithfully) {
  const std::vector<uint8_t> rgb = TestPixels(16, 16, 3);
  EXPECT_THAT(Decode(EncodeJpeg(rgb, 16, 16, 3), 1).status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a color JPEG image for a 1-channel model")));
  EXPECT_THAT(Decode(EncodePng(rgb, 16, 16, 3), 1).status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a color PNG image for a 1-channel model")));
  EXPECT_THAT(Decode(EncodeJpeg(TestPixels(16, 16, 4), 16, 16, 4), 3).status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a CMYK JPEG")));
  EXPECT_THAT(Decode(EncodePng(TestPixels(4, 4, 6), 4, 4, 3, true), 3).status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a 16-bit PNG")));
  EXPECT_THAT(Decode("GIF89a....", 3).status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a JPEG or PNG image (10 bytes, starting 47 49 46 38")));
  EXPECT_THAT(Decode("", 3).status, StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("not a JPEG or PNG image (0 bytes)")));
}

TEST(ImageDecoder, CorruptAndTruncatedImagesAreDataLoss) {
  const std::vector<uint8_t> rgb = TestPixels(40, 40, 3);
  const std::string jpeg = EncodeJpeg(rgb, 40, 40, 3), png = EncodePng(rgb, 40, 40, 3);
  EXPECT_THAT(Decode(jpeg.substr(0, jpeg.size() / 2), 3).status,
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated JPEG")));
  EXPECT_THAT(Decode(jpeg.substr(0, 30), 3).status,
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("corrupt JPEG")));
  std::string empty = jpeg;
  const size_t sof = empty.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  empty[sof + 5] = empty[sof + 6] = 0;  // the frame's height: 0
  EXPECT_THAT(Decode(empty, 3).status,
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("corrupt JPEG: Empty JPEG image")));
  EXPECT_THAT(Decode(png.substr(0, png.size() - 20), 3).status,
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated PNG")));
  std::string crc = png;
  crc[20] ^= 1;  // inside IHDR: its CRC no longer matches
  EXPECT_THAT(Decode(crc, 3).status,
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("corrupt PNG")));
  std::string idat = png;
  const size_t at = idat.find("IDAT") + 10;
  idat[at] ^= 0x55;
  EXPECT_THAT(Decode(idat, 3).status,
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("corrupt PNG")));
  // The decoder is sound after a failure.
  const Decoded d = Decode(png, 3);
  ASSERT_OK(d.status);
  EXPECT_EQ(d.pixels, rgb);
}

}  // namespace
}  // namespace lockstep
