#include "core/data/bilinear_resize.h"

#include <numeric>

#include "core/testing.h"

namespace lockstep {
namespace {

TEST(BilinearResize, TapsSumToOneInFixedPoint) {
  BilinearResizer::Taps t;
  for (auto [in, out] :
       {std::pair(10, 10), std::pair(500, 224), std::pair(7, 31), std::pair(375, 1)}) {
    BilinearResizer::ComputeTaps(in, out, &t);
    for (int i = 0; i < out; ++i) {
      ASSERT_GE(t.first[i], 0);
      ASSERT_LE(t.first[i] + t.count[i], in);
      const int64_t sum = std::accumulate(&t.weights[i * t.stride],
                                          &t.weights[i * t.stride] + t.count[i], int64_t{0});
      EXPECT_NEAR(sum, 1 << 22, t.count[i]) << in << "->" << out << " at " << i;
    }
  }
  // Same size: each output reads its own input with weight 1.
  BilinearResizer::ComputeTaps(5, 5, &t);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(t.first[i], i);
    EXPECT_EQ(t.weights[i * t.stride], 1 << 22);
  }
}

TEST(BilinearResize, AConstantImageStaysConstant) {
  std::vector<uint8_t> in(37 * 23 * 3, 201), out(11 * 50 * 3);
  BilinearResizer r;
  r.Resize(ImageView::Packed(in.data(), 37, 23, 3), 11, 50, out.data());
  for (uint8_t v : out) ASSERT_EQ(v, 201);
}

TEST(BilinearResize, MirroredAndCroppedViewsReadWhatTheyShow) {
  std::vector<uint8_t> in(4 * 6);
  std::iota(in.begin(), in.end(), 0);
  const ImageView v = ImageView::Packed(in.data(), 4, 6, 1);
  std::vector<uint8_t> a(4 * 3), b(4 * 3), packed(4 * 6);
  // A mirrored view resized equals the mirrored image, packed, resized.
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 6; ++x) packed[y * 6 + x] = in[y * 6 + 5 - x];
  }
  BilinearResizer r;
  r.Resize(v.Mirrored(), 4, 3, a.data());
  r.Resize(ImageView::Packed(packed.data(), 4, 6, 1), 4, 3, b.data());
  EXPECT_EQ(a, b);
  // Same size: a copy of the view.
  std::vector<uint8_t> c(2 * 3);
  r.Resize(v.Crop(1, 2, 2, 3), 2, 3, c.data());
  EXPECT_EQ(c, (std::vector<uint8_t>{8, 9, 10, 14, 15, 16}));
}

}  // namespace
}  // namespace lockstep
