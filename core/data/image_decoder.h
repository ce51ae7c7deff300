// ImageDecoder: an encoded image (JPEG or PNG, told by its signature) into 8-bit HWC
// pixels with the model's channel count, exactly as Pillow decodes it and
// Image.convert("RGB") (or "L" for a gray image and a 1-channel model) converts it, so
// that tools/reference/augment.py's PIL decode gives the same pixels:
//
// - JPEG with libjpeg-turbo's libjpeg API (the library Pillow's wheels bundle; the
//   accurate integer IDCT and fancy upsampling, libjpeg's defaults and Pillow's).
//   Grayscale, YCbCr and RGB JPEGs; a grayscale one into 3 channels repeats its gray.
//   Refused: CMYK and YCCK (INVALID_ARGUMENT), color into 1 channel (which weights would
//   make it gray is a choice: convert the data), truncated or corrupt data (DATA_LOSS;
//   a file ending early is refused as Pillow refuses it, and libjpeg's other warnings are
//   let pass as Pillow lets them).
// - PNG with libpng: 8-bit (or 1, 2, 4-bit gray, scaled up) gray, gray + alpha, RGB,
//   RGBA and palette images; alpha dropped (as convert("RGB") drops it), a palette looked
//   up, gray repeated into 3 channels, no gamma applied (Pillow applies none). Refused:
//   16-bit images, color or palette into 1 channel (INVALID_ARGUMENT), a CRC mismatch in
//   any chunk, a corrupt or truncated stream (DATA_LOSS).
// - Either: more than kMaxImagePixels pixels (INVALID_ARGUMENT: a decompression bomb),
//   checked on the header before any pixel is decoded.
//
// Thread safety: one decoder per thread (it keeps its buffers between images).
#ifndef LOCKSTEP_CORE_DATA_IMAGE_DECODER_H_
#define LOCKSTEP_CORE_DATA_IMAGE_DECODER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/data/image_view.h"

namespace lockstep {

// The most pixels an image may have at any step of the preprocessing (Pillow refuses 2x
// its MAX_IMAGE_PIXELS, about 179 M, as a bomb): bounds a decoder thread's memory.
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 26;

class ImageDecoder {
 public:
  // Images of more than `max_pixels` are refused (a fuzzer's decoder takes fewer).
  explicit ImageDecoder(int64_t max_pixels = kMaxImagePixels);
  ~ImageDecoder();
  ImageDecoder(const ImageDecoder&) = delete;
  ImageDecoder& operator=(const ImageDecoder&) = delete;

  // `bytes` decoded into *pixels (resized, reused) as height x width x channels, packed;
  // channels is 1 or 3. The errors above, saying why.
  absl::Status Decode(absl::string_view bytes, int channels, std::vector<uint8_t>* pixels,
                      int* height, int* width);

  // The image's size from its header (JPEG's frame, PNG's IHDR) without decoding it. The
  // errors above that a header shows.
  absl::Status ReadSize(absl::string_view bytes, int* height, int* width);

  // The pixels Decode gives inside `box` (which must lie in the image), as a view into
  // *pixels. A JPEG's rows above and below the box are entropy-decoded only (libjpeg-
  // turbo's jpeg_skip_scanlines: every error a full decode finds is found), and its rows
  // through the box are transformed only from the iMCU column left of the box to the one
  // right of it (jpeg_crop_scanline; the margin keeps fancy upsampling exact: checked
  // against full decodes of 10,000 random boxes of every subsampling). A PNG decodes whole.
  absl::StatusOr<ImageView> DecodeRegion(absl::string_view bytes, int channels, const CropBox& box,
                                         std::vector<uint8_t>* pixels);

 private:
  struct Jpeg;
  // A new libjpeg decompressor in jpeg_, reading `bytes`.
  void FreshDecompressor(absl::string_view bytes);
  // A full decode, or with `box` the rows through it and the columns around it; *view
  // shows the box (or the whole image).
  absl::Status DecodeJpeg(absl::string_view bytes, int channels, const CropBox* box,
                          std::vector<uint8_t>* pixels, ImageView* view);
  absl::Status DecodePng(absl::string_view bytes, int channels, std::vector<uint8_t>* pixels,
                         int* height, int* width);

  const int64_t max_pixels_;
  std::unique_ptr<Jpeg> jpeg_;
  std::vector<uint8_t*> rows_;
  std::vector<uint8_t> last_row_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_IMAGE_DECODER_H_
