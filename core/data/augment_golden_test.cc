// Every preprocessing step against tools/reference/augment.py (Pillow's decoders, numpy,
// jax.random), bit for bit in float32: tests/golden/augment.safetensors, written by
// tools/reference/golden_augment.py.
#include <cstring>

#include "core/data/image_transform.h"
#include "core/io/safetensors.h"
#include "core/testing.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace lockstep {
namespace {

TEST(AugmentGolden, EveryCaseBitForBit) {
  ASSERT_OK_AND_ASSIGN(SafeTensors golden,
                       SafeTensors::Read(testing::GoldenDir() + "/augment.safetensors"));
  const nlohmann::json cases = nlohmann::json::parse(golden.metadata().at("cases"));
  ASSERT_GE(cases.size(), 100u);
  int checked = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const nlohmann::json& c = cases[i];
    SCOPED_TRACE(c["name"].get<std::string>());
    v1::DatasetSpec spec;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(c["spec"].dump(), &spec).ok());
    const Dims shape{c["input_shape"][0], c["input_shape"][1], c["input_shape"][2]};
    ASSERT_OK_AND_ASSIGN(auto transform, ImageTransform::Create(spec, Split::kTrain, shape));
    ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> image, golden.U8(absl::StrCat("case", i, ".image")));
    ASSERT_OK_AND_ASSIGN(std::vector<float> want, golden.F32(absl::StrCat("case", i, ".out")));
    StoredExample ex;
    ex.bytes.assign(image.begin(), image.end());
    if (!c["raw_shape"].is_null()) {
      ex.kind = StoredExample::Kind::kRaw;
      ex.shape = {c["raw_shape"][0], c["raw_shape"][1], c["raw_shape"][2]};
    }
    const rng::Key key{c["key"][0], c["key"][1]};
    auto scratch = transform->NewScratch();
    std::vector<float> got(shape.size());
    ASSERT_OK(transform->Apply(ex, key, scratch.get(), got.data()));
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < got.size(); ++j) {
      const int64_t px = static_cast<int64_t>(j) / shape.c;
      ASSERT_EQ(std::memcmp(&got[j], &want[j], sizeof(float)), 0)
          << "pixel (" << px / shape.w << ", " << px % shape.w << ") channel " << j % shape.c
          << ": " << got[j] << " against the reference's " << want[j];
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(cases.size()));
}

}  // namespace
}  // namespace lockstep
