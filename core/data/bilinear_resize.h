// BilinearResizer: PIL's Image.resize(size, Image.BILINEAR) of an 8-bit image, pixel for
// pixel (Pillow's libImaging/Resample.c, which torchvision's Resize and RandomResizedCrop
// call on PIL images): a triangle filter widened by the downscale factor (antialiased),
// its taps computed in double and rounded to 22-bit fixed point, a horizontal pass then a
// vertical one, each rounding to uint8. docs/datasets.md writes the math out;
// tools/reference/augment.py is its numpy twin, itself checked against PIL.
//
// Thread safety: one resizer per thread (it keeps its taps and the pass between calls,
// so that a steady stream of images allocates nothing).
#ifndef LOCKSTEP_CORE_DATA_BILINEAR_RESIZE_H_
#define LOCKSTEP_CORE_DATA_BILINEAR_RESIZE_H_

#include <cstdint>
#include <vector>

#include "core/data/image_view.h"

namespace lockstep {

class BilinearResizer {
 public:
  // `in` resized to out_height x out_width into out[out_height * out_width *
  // in.channels], packed. Requires sizes >= 1; `out` must not overlap `in`.
  void Resize(const ImageView& in, int out_height, int out_width, uint8_t* out);

  // The fixed-point taps of one axis (PIL's precompute_coeffs + normalize_coeffs_8bpc):
  // output i reads inputs [first[i], first[i] + count[i]) with weights
  // taps[i * stride, ...). For tests.
  struct Taps {
    int stride = 0;
    std::vector<int> first, count;
    std::vector<int32_t> weights;
    std::vector<double> raw;  // working memory
  };
  static void ComputeTaps(int in_size, int out_size, Taps* taps);

 private:
  Taps horizontal_, vertical_;
  std::vector<uint8_t> mid_;  // the horizontal pass
  std::vector<int32_t> acc_;  // a row of the vertical pass's sums
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DATA_BILINEAR_RESIZE_H_
