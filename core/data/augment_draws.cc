// The random choices of the preprocessing steps, each drawn from the step's key alone.
// Contract: augment_draws.h.
#include "core/data/augment_draws.h"

#include <cmath>

#include "core/rng/random.h"

namespace lockstep {
namespace {

constexpr rng::Impl kDrawImpl = rng::Impl::kPartitionable;
constexpr int kResizedCropTries = 10;

// Python's int(round(x)): to the nearest, ties to even (the default rounding mode).
int RoundHalfEven(double x) { return static_cast<int>(std::nearbyint(x)); }

}  // namespace

CropBox RandomCropBox(rng::Key op_key, int padded_h, int padded_w, int crop_h, int crop_w) {
  CropBox box{0, 0, crop_h, crop_w};
  box.top = rng::RandInt(rng::FoldIn(op_key, 0), kDrawImpl, 0, padded_h - crop_h + 1);
  box.left = rng::RandInt(rng::FoldIn(op_key, 1), kDrawImpl, 0, padded_w - crop_w + 1);
  return box;
}

CropBox RandomResizedCropBox(rng::Key op_key, int in_h, int in_w, const ResizedCropRanges& r) {
  const rng::Key draws = rng::FoldIn(op_key, 0);
  const double area = static_cast<double>(in_h) * in_w;
  const double log_min = std::log(r.ratio_min), log_max = std::log(r.ratio_max);
  constexpr uint64_t kDraws = 2 * kResizedCropTries;
  for (int t = 0; t < kResizedCropTries; ++t) {
    const double u0 = rng::BitsToUnitFloat(rng::RandomBitsAt(draws, kDrawImpl, 2 * t, kDraws));
    const double u1 = rng::BitsToUnitFloat(rng::RandomBitsAt(draws, kDrawImpl, 2 * t + 1, kDraws));
    const double target_area = area * (r.scale_min + (r.scale_max - r.scale_min) * u0);
    const double aspect = std::exp(log_min + (log_max - log_min) * u1);
    const int w = RoundHalfEven(std::sqrt(target_area * aspect));
    const int h = RoundHalfEven(std::sqrt(target_area / aspect));
    if (0 < w && w <= in_w && 0 < h && h <= in_h) {
      return {rng::RandInt(rng::FoldIn(op_key, 1), kDrawImpl, 0, in_h - h + 1),
              rng::RandInt(rng::FoldIn(op_key, 2), kDrawImpl, 0, in_w - w + 1), h, w};
    }
  }
  const double in_ratio = static_cast<double>(in_w) / in_h;
  int w = in_w, h = in_h;
  if (in_ratio < r.ratio_min) {
    h = RoundHalfEven(w / r.ratio_min);
  } else if (in_ratio > r.ratio_max) {
    w = RoundHalfEven(h * r.ratio_max);
  }
  return {(in_h - h) / 2, (in_w - w) / 2, h, w};
}

bool FlipDraw(rng::Key op_key, double p) {
  return rng::BitsToUnitFloat(rng::RandomBitsAt(op_key, kDrawImpl, 0, 1)) < static_cast<float>(p);
}

}  // namespace lockstep
