// Encoding images in tests (and in the cluster tests that stream them): JPEG with
// libjpeg-turbo, PNG with libpng, from 8-bit HWC pixels.
#ifndef LOCKSTEP_CORE_DATA_IMAGE_TESTING_H_
#define LOCKSTEP_CORE_DATA_IMAGE_TESTING_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

// jpeglib.h needs stdio's FILE and size_t first.
#include <jpeglib.h>
#include <png.h>

namespace lockstep::testing {

// A JPEG of h x w pixels of `channels` (1: grayscale, 3: RGB, 4: CMYK), baseline,
// 4:2:0 for color (libjpeg's defaults) unless `subsample` is false (4:4:4).
inline std::string EncodeJpeg(const std::vector<uint8_t>& pixels, int h, int w, int channels,
                              int quality = 90, bool subsample = true) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = w;
  c.image_height = h;
  c.input_components = channels;
  c.in_color_space = channels == 1 ? JCS_GRAYSCALE : (channels == 3 ? JCS_RGB : JCS_CMYK);
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  if (!subsample) {
    for (int i = 0; i < c.num_components; ++i) {
      c.comp_info[i].h_samp_factor = 1;
      c.comp_info[i].v_samp_factor = 1;
    }
  }
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(&pixels[size_t{c.next_scanline} * w * channels]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::string out(reinterpret_cast<char*>(buf), size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

// A PNG of h x w pixels of `channels` (1 gray, 2 gray + alpha, 3 RGB, 4 RGBA), 8-bit, or
// 16-bit (big-endian samples, as PNG stores them, two bytes each in `pixels`).
inline std::string EncodePng(const std::vector<uint8_t>& pixels, int h, int w, int channels,
                             bool sixteen_bit = false) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = w;
  image.height = h;
  const png_uint_32 formats[] = {0, PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB,
                                 PNG_FORMAT_RGBA};
  image.format = formats[channels] | (sixteen_bit ? PNG_FORMAT_FLAG_LINEAR : 0);
  std::vector<uint16_t> wide;
  const void* data = pixels.data();
  if (sixteen_bit) {  // the simplified API takes 16-bit samples in the host's order
    for (size_t i = 0; i + 1 < pixels.size(); i += 2)
      wide.push_back(pixels[i] << 8 | pixels[i + 1]);
    data = wide.data();
  }
  png_alloc_size_t size = 0;
  png_image_write_to_memory(&image, nullptr, &size, 0, data, 0, nullptr);
  std::string out(size, '\0');
  png_image_write_to_memory(&image, out.data(), &size, 0, data, 0, nullptr);
  out.resize(size);
  return out;
}

// h x w x channels pixels of a smooth pattern that compresses like a photo.
inline std::vector<uint8_t> TestPixels(int h, int w, int channels, int seed = 0) {
  std::vector<uint8_t> p(size_t{1} * h * w * channels);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int k = 0; k < channels; ++k) {
        p[(size_t{1} * y * w + x) * channels + k] =
            static_cast<uint8_t>((x * 5 + y * 3 + k * 70 + seed * 13 + (x * y) % 17) % 256);
      }
    }
  }
  return p;
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_CORE_DATA_IMAGE_TESTING_H_
