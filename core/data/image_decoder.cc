// ImageDecoder: a JPEG or PNG into 8-bit HWC pixels as Pillow decodes and converts it.
// Contract: image_decoder.h.
#include "core/data/image_decoder.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

// jpeglib.h needs stdio's FILE and size_t first.
#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include "absl/strings/str_cat.h"

namespace lockstep {

// libjpeg's error manager with a way out (longjmp) and what it saw.
struct JpegError {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  bool truncated = false;
  char message[JMSG_LENGTH_MAX] = {};
};

namespace {

constexpr unsigned char kJpegMagic[] = {0xff, 0xd8, 0xff};
constexpr unsigned char kPngMagic[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

bool HasMagic(absl::string_view b, const unsigned char* magic, size_t n) {
  return b.size() >= n && std::memcmp(b.data(), magic, n) == 0;
}

absl::Status TooLarge(const char* kind, int64_t h, int64_t w, int64_t max) {
  return absl::InvalidArgumentError(
      absl::StrCat("a ", h, "x", w, " ", kind, " image: over ", max, " pixels"));
}

absl::Status NotGray(const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat("a ", what,
                   " image for a 1-channel model: turning color into gray is a choice "
                   "Lockstep does not make (convert the data, or give the model 3 channels)"));
}

[[noreturn]] void JpegErrorExit(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegError*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings pass (as Pillow lets them), but a file that ends early is remembered: libjpeg
// then makes up the rest of the image, which Pillow refuses ("image file is truncated").
void JpegEmitMessage(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) {
    reinterpret_cast<JpegError*>(c->err)->truncated = true;
  }
}

void JpegOutputMessage(j_common_ptr) {}

struct PngInput {
  absl::string_view bytes;
  size_t pos = 0;
  bool truncated = false;
  char message[256] = {};
};

void PngRead(png_structp png, png_bytep out, png_size_t n) {
  auto* in = static_cast<PngInput*>(png_get_io_ptr(png));
  if (n > in->bytes.size() - in->pos) {
    in->truncated = true;
    png_error(png, "the file ends early");
  }
  std::memcpy(out, in->bytes.data() + in->pos, n);
  in->pos += n;
}

void PngError(png_structp png, png_const_charp message) {
  auto* in = static_cast<PngInput*>(png_get_error_ptr(png));
  std::snprintf(in->message, sizeof(in->message), "%s", message);
  png_longjmp(png, 1);
}

void PngWarning(png_structp, png_const_charp) {}

absl::Status NotAnImage(absl::string_view bytes) {
  std::string head;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) {
    absl::StrAppend(&head, i ? " " : "",
                    absl::Hex(static_cast<uint8_t>(bytes[i]), absl::kZeroPad2));
  }
  return absl::InvalidArgumentError(absl::StrCat("not a JPEG or PNG image (", bytes.size(),
                                                 " bytes", bytes.empty() ? "" : ", starting ", head,
                                                 ")"));
}

}  // namespace

struct ImageDecoder::Jpeg {
  jpeg_decompress_struct cinfo;
  JpegError err;
};

ImageDecoder::ImageDecoder(int64_t max_pixels)
    : max_pixels_(max_pixels), jpeg_(std::make_unique<Jpeg>()) {
  jpeg_->cinfo.err = jpeg_std_error(&jpeg_->err.pub);
  jpeg_->err.pub.error_exit = JpegErrorExit;
  jpeg_->err.pub.emit_message = JpegEmitMessage;
  jpeg_->err.pub.output_message = JpegOutputMessage;
  jpeg_create_decompress(&jpeg_->cinfo);
}

ImageDecoder::~ImageDecoder() { jpeg_destroy_decompress(&jpeg_->cinfo); }

// libjpeg keeps an image's Huffman and quantization tables in its decompressor for the
// next (abbreviated streams): each image gets a fresh one, so that no image decodes
// differently after another (image_fuzz found one that did).
void ImageDecoder::FreshDecompressor(absl::string_view bytes) {
  jpeg_destroy_decompress(&jpeg_->cinfo);
  jpeg_create_decompress(&jpeg_->cinfo);
  jpeg_mem_src(&jpeg_->cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
}

absl::Status ImageDecoder::Decode(absl::string_view bytes, int channels,
                                  std::vector<uint8_t>* pixels, int* height, int* width) {
  if (HasMagic(bytes, kJpegMagic, sizeof(kJpegMagic))) {
    ImageView view;
    absl::Status s = DecodeJpeg(bytes, channels, nullptr, pixels, &view);
    *height = view.height;
    *width = view.width;
    return s;
  }
  if (HasMagic(bytes, kPngMagic, sizeof(kPngMagic))) {
    return DecodePng(bytes, channels, pixels, height, width);
  }
  return NotAnImage(bytes);
}

absl::StatusOr<ImageView> ImageDecoder::DecodeRegion(absl::string_view bytes, int channels,
                                                     const CropBox& box,
                                                     std::vector<uint8_t>* pixels) {
  ImageView view;
  if (HasMagic(bytes, kJpegMagic, sizeof(kJpegMagic))) {
    absl::Status s = DecodeJpeg(bytes, channels, &box, pixels, &view);
    if (!s.ok()) return s;
    return view;
  }
  int h = 0, w = 0;
  absl::Status s = Decode(bytes, channels, pixels, &h, &w);
  if (!s.ok()) return s;
  return ImageView::Packed(pixels->data(), h, w, channels)
      .Crop(box.top, box.left, box.height, box.width);
}

absl::Status ImageDecoder::ReadSize(absl::string_view bytes, int* height, int* width) {
  if (HasMagic(bytes, kPngMagic, sizeof(kPngMagic))) {
    // The IHDR chunk comes first: length 13, "IHDR", width, height (big-endian).
    if (bytes.size() < 24 || bytes.substr(12, 4) != "IHDR") {
      return absl::DataLossError("corrupt PNG: no IHDR chunk first");
    }
    const auto be32 = [&](size_t at) {
      uint32_t v = 0;
      for (size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<uint8_t>(bytes[at + i]);
      return v;
    };
    const uint32_t w = be32(16), h = be32(20);
    if (w == 0 || h == 0 || w > (1u << 30) || h > (1u << 30)) {
      return absl::DataLossError(absl::StrCat("corrupt PNG: a ", h, "x", w, " image"));
    }
    if (int64_t{h} * w > max_pixels_) return TooLarge("PNG", h, w, max_pixels_);
    *height = static_cast<int>(h);
    *width = static_cast<int>(w);
    return absl::OkStatus();
  }
  if (!HasMagic(bytes, kJpegMagic, sizeof(kJpegMagic))) return NotAnImage(bytes);
  FreshDecompressor(bytes);
  jpeg_decompress_struct* c = &jpeg_->cinfo;
  JpegError* err = &jpeg_->err;
  bool header = false;
  if (setjmp(err->jump)) {
    jpeg_abort_decompress(c);
    return absl::DataLossError(absl::StrCat("corrupt JPEG: ", err->message));
  }
  header = jpeg_read_header(c, TRUE) == JPEG_HEADER_OK;
  const int64_t h = c->image_height, w = c->image_width;
  jpeg_abort_decompress(c);
  if (!header) return absl::InvalidArgumentError("a JPEG of tables only, no image");
  if (h * w > max_pixels_) return TooLarge("JPEG", h, w, max_pixels_);
  *height = static_cast<int>(h);
  *width = static_cast<int>(w);
  return absl::OkStatus();
}

// Between setjmp and a longjmp back to it this function holds no object with a
// destructor: only libjpeg calls and members.
absl::Status ImageDecoder::DecodeJpeg(absl::string_view bytes, int channels, const CropBox* box,
                                      std::vector<uint8_t>* pixels, ImageView* view) {
  FreshDecompressor(bytes);
  jpeg_decompress_struct* c = &jpeg_->cinfo;
  JpegError* err = &jpeg_->err;
  err->truncated = false;
  int refused = 0;  // 1: CMYK, 2: color into gray, 3: too large, 4: no image, 5: box outside
  if (setjmp(err->jump)) {
    jpeg_abort_decompress(c);
    return absl::DataLossError(absl::StrCat("corrupt JPEG: ", err->message));
  }
  if (jpeg_read_header(c, TRUE) != JPEG_HEADER_OK) {
    refused = 4;
  } else if (c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK) {
    refused = 1;
  } else if (channels == 1 && c->jpeg_color_space != JCS_GRAYSCALE) {
    refused = 2;
  } else if (int64_t{c->image_height} * c->image_width > max_pixels_) {
    refused = 3;
  } else if (box != nullptr &&
             (box->top < 0 || box->left < 0 || box->height < 1 || box->width < 1 ||
              static_cast<JDIMENSION>(box->top + box->height) > c->image_height ||
              static_cast<JDIMENSION>(box->left + box->width) > c->image_width)) {
    refused = 5;
  } else {
    c->out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(c);
    // Rows [first, last) of columns [x, x + w) (libjpeg rounds x down and w up to iMCUs).
    JDIMENSION first = 0, last = c->output_height, x = 0, w = c->output_width;
    if (box != nullptr) {
      const int imcu = c->max_h_samp_factor * DCTSIZE;
      const int left = std::max(0, box->left - imcu);
      const int right = std::min<int>(c->output_width, box->left + box->width + imcu);
      first = box->top;
      last = box->top + box->height;
      x = left;
      w = right - left;
      if (w < c->output_width) jpeg_crop_scanline(c, &x, &w);
    }
    const size_t row = size_t{c->output_width} * channels;
    pixels->resize(row * (last - first));
    rows_.resize(last - first);
    for (JDIMENSION y = 0; y < last - first; ++y) rows_[y] = pixels->data() + y * row;
    if (first > 0) jpeg_skip_scanlines(c, first);
    while (c->output_scanline < last) {
      jpeg_read_scanlines(c, rows_.data() + (c->output_scanline - first),
                          last - c->output_scanline);
    }
    // The rows below the box are entropy-decoded still, so that a file truncated or
    // corrupt there fails as a full decode would. (Skipping to the very end would not:
    // libjpeg-turbo then stops reading, so the last row is read.)
    if (last < c->output_height) {
      if (c->output_height - last > 1) jpeg_skip_scanlines(c, c->output_height - last - 1);
      last_row_.resize(row);
      JSAMPROW r = last_row_.data();
      jpeg_read_scanlines(c, &r, 1);
    }
    jpeg_finish_decompress(c);
    *view = ImageView::Packed(pixels->data(), static_cast<int>(last - first),
                              static_cast<int>(c->output_width), channels);
    if (box != nullptr)
      *view = view->Crop(0, box->left - static_cast<int>(x), box->height, box->width);
  }
  const int64_t h = c->image_height, w = c->image_width;
  if (refused != 0) jpeg_abort_decompress(c);
  switch (refused) {
    case 1:
      return absl::InvalidArgumentError(
          "a CMYK JPEG: only grayscale, YCbCr and RGB JPEGs are read (convert it to RGB)");
    case 2:
      return NotGray("color JPEG");
    case 3:
      return TooLarge("JPEG", h, w, max_pixels_);
    case 4:
      return absl::InvalidArgumentError("a JPEG of tables only, no image");
    case 5:
      return absl::InternalError(absl::StrCat("a box outside the ", h, "x", w, " JPEG"));
    default:
      break;
  }
  if (err->truncated) {
    return absl::DataLossError("truncated JPEG: the file ends before the image data does");
  }
  return absl::OkStatus();
}

absl::Status ImageDecoder::DecodePng(absl::string_view bytes, int channels,
                                     std::vector<uint8_t>* pixels, int* height, int* width) {
  PngInput in{bytes};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &in, PngError, PngWarning);
  if (png == nullptr) return absl::ResourceExhaustedError("libpng: cannot allocate a reader");
  png_infop info = png_create_info_struct(png);
  int refused = 0;  // 1: 16-bit, 2: color into gray, 3: too large, 4: rows of another size
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0;
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
    if (in.truncated) return absl::DataLossError("truncated PNG: the file ends early");
    return absl::DataLossError(absl::StrCat("corrupt PNG: ", in.message));
  }
  png_set_read_fn(png, &in, PngRead);
  // A CRC mismatch in any chunk is an error (libpng lets an ancillary chunk's pass).
  png_set_crc_action(png, PNG_CRC_DEFAULT, PNG_CRC_ERROR_QUIT);
  png_set_user_limits(png, 1u << 20, 1u << 20);
  png_read_info(png, info);
  png_get_IHDR(png, info, &w, &h, &depth, &color, nullptr, nullptr, nullptr);
  const bool gray = (color & PNG_COLOR_MASK_COLOR) == 0;
  if (depth == 16) {
    refused = 1;
  } else if (channels == 1 && !gray) {
    refused = 2;
  } else if (int64_t{h} * w > max_pixels_) {
    refused = 3;
  } else {
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (gray && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
    if (gray && channels == 3) png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const size_t row = size_t{w} * channels;
    if (png_get_rowbytes(png, info) != row) {
      refused = 4;
    } else {
      pixels->resize(row * h);
      rows_.resize(h);
      for (png_uint_32 y = 0; y < h; ++y) rows_[y] = pixels->data() + y * row;
      png_read_image(png, rows_.data());
      png_read_end(png, nullptr);
      *height = static_cast<int>(h);
      *width = static_cast<int>(w);
    }
  }
  png_destroy_read_struct(&png, &info, nullptr);
  switch (refused) {
    case 1:
      return absl::InvalidArgumentError("a 16-bit PNG: only 8-bit PNGs are read");
    case 2:
      return NotGray(color == PNG_COLOR_TYPE_PALETTE ? "palette PNG" : "color PNG");
    case 3:
      return TooLarge("PNG", h, w, max_pixels_);
    case 4:
      return absl::InternalError("libpng: rows of an unexpected size");
    default:
      return absl::OkStatus();
  }
}

}  // namespace lockstep
