// Fuzzes the image decoders and the preprocessing behind them as a worker runs them on
// an example's bytes (core/data/image_decoder.h, image_transform.h): JPEG (libjpeg-turbo)
// and PNG (libpng) into 1 and 3 channels with a 1 M pixel limit, then a random resized
// crop, a resize and a flip keyed by the input's first bytes. A decoded image must be
// the size it says.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/data/image_decoder.h"
#include "core/data/image_transform.h"
#include "google/protobuf/util/json_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  static ImageDecoder* decoder = new ImageDecoder(1 << 20);
  static const auto* transform = [] {
    v1::DatasetSpec spec;
    if (!google::protobuf::util::JsonStringToMessage(
             R"({"format": "imagefolder", "preprocess": [{"resize": {"shorter_side": 40}},
                 {"random_resized_crop": {"size": 24}}, {"horizontal_flip": {}}]})",
             &spec)
             .ok()) {
      std::abort();
    }
    return ImageTransform::Create(spec, Split::kTrain, {24, 24, 3})->release();
  }();
  static auto* scratch = transform->NewScratch().release();
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  std::vector<uint8_t> pixels;
  for (int channels : {1, 3}) {
    int h = 0, w = 0;
    if (decoder->Decode(bytes, channels, &pixels, &h, &w).ok() &&
        (h < 1 || w < 1 || pixels.size() != size_t{1} * h * w * channels)) {
      std::abort();
    }
  }
  // The transform decodes with its own default limit: only small images go through it.
  int h = 0, w = 0;
  if (!decoder->Decode(bytes, 3, &pixels, &h, &w).ok() || int64_t{h} * w > (1 << 16)) return 0;
  StoredExample example;
  example.bytes = bytes;
  rng::Key key{size > 0 ? data[0] : 0u, size > 1 ? data[1] : 0u};
  std::vector<float> out(24 * 24 * 3);
  const absl::Status applied = transform->Apply(example, key, scratch, out.data());
  if (!applied.ok()) {
    std::fprintf(stderr, "decoded, yet the transform failed: %s\n", applied.ToString().c_str());
    std::abort();
  }
  return 0;
}
