// ImageView: an 8-bit HWC image in memory it does not own, addressed through row and
// pixel steps so that a crop or a horizontal mirror is a new view, not a copy.
//
// Thread safety: a plain value.
#ifndef LOCKSTEP_CORE_DATA_IMAGE_VIEW_H_
#define LOCKSTEP_CORE_DATA_IMAGE_VIEW_H_

#include <cstddef>
#include <cstdint>

namespace lockstep {

// A window of an image: rows [top, top + height), columns [left, left + width).
struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;
  friend bool operator==(const CropBox&, const CropBox&) = default;
};

struct ImageView {
  const uint8_t* data = nullptr;  // pixel (0, 0), channel 0
  int height = 0, width = 0, channels = 0;
  ptrdiff_t row_step = 0;    // bytes from a pixel to the one below it
  ptrdiff_t pixel_step = 0;  // bytes to the one on its right (negative when mirrored)

  // A packed image: rows of width * channels bytes one after the other.
  static ImageView Packed(const uint8_t* data, int height, int width, int channels) {
    return {data, height, width, channels, ptrdiff_t{width} * channels, channels};
  }

  const uint8_t* at(int y, int x) const { return data + y * row_step + x * pixel_step; }
  // Whether pixels lie side by side left to right, channels interleaved (rows may have gaps).
  bool packed_rows() const { return pixel_step == channels; }

  // Rows [top, top + h) and columns [left, left + w); the caller keeps them inside.
  ImageView Crop(int top, int left, int h, int w) const {
    return {at(top, left), h, w, channels, row_step, pixel_step};
  }
  // Left and right exchanged.
  ImageView Mirrored() const {
    return {at(0, width - 1), height, width, channels, row_step, -pixel_step};
  }
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_IMAGE_VIEW_H_
