// ImageTransform: a stored example decoded and preprocessed as the spec says, before
// it enters a batch. Contract: image_transform.h.
#include "core/data/image_transform.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/augment_draws.h"
#include "core/data/bilinear_resize.h"
#include "core/data/image_decoder.h"
#include "core/data/image_view.h"
#include "core/data/streamed_spec.h"

namespace lockstep {
namespace {

class TransformScratch final : public ImageTransform::Scratch {
 public:
  ImageDecoder decoder;
  BilinearResizer resizer;
  // Ping-pong buffers: a step that makes new pixels writes the one the view is not in.
  std::vector<uint8_t> buffers[2];
};

// One preprocessing step, read out of the spec once.
struct PlannedStep {
  v1::Preprocess::OpCase op;
  uint32_t index;  // in the spec's list: its key is fold_in(example_key, index)
  std::string field;
  int shorter_side = 0;
  CropSize size;
  int padding = 0;
  ResizedCropRanges ranges{};
  double probability = 0;
};

std::string SizeText(int h, int w) { return absl::StrCat(h, "x", w); }

class StepTransform final : public ImageTransform {
 public:
  StepTransform(std::vector<PlannedStep> steps, Dims out, std::vector<float> lut)
      : steps_(std::move(steps)), out_(out), lut_(std::move(lut)) {
    first_step_windows_ = !steps_.empty() && KeepsAWindow(steps_[0]);
    for (const PlannedStep& s : steps_) {
      random_ |= s.op == v1::Preprocess::kRandomCrop ||
                 s.op == v1::Preprocess::kRandomResizedCrop ||
                 s.op == v1::Preprocess::kHorizontalFlip;
    }
  }

  const Dims& output_shape() const override { return out_; }
  bool random() const override { return random_; }
  std::unique_ptr<Scratch> NewScratch() const override {
    return std::make_unique<TransformScratch>();
  }

  absl::Status Apply(const StoredExample& example, rng::Key key, Scratch* scratch,
                     float* out) const override {
    auto* s = static_cast<TransformScratch*>(scratch);
    ImageView view;
    int in_buffer = -1;  // which of s->buffers holds the view's pixels (-1: neither)
    if (example.kind == StoredExample::Kind::kRaw) {
      if (example.shape.c != out_.c) {
        return absl::InvalidArgumentError(
            absl::StrCat("the image has ", example.shape.c, " channels, the model takes ", out_.c,
                         " (model.input_shape ", DimsString(out_), ")"));
      }
      if (static_cast<int64_t>(example.bytes.size()) != example.shape.size()) {
        return absl::DataLossError(absl::StrCat(example.bytes.size(), " bytes for a ",
                                                DimsString(example.shape), " image"));
      }
      view = ImageView::Packed(reinterpret_cast<const uint8_t*>(example.bytes.data()),
                               example.shape.h, example.shape.w, example.shape.c);
    }
    size_t done = 0;  // steps run
    if (example.kind == StoredExample::Kind::kEncoded && first_step_windows_) {
      // The first step keeps a window of the image: decode that window only.
      int h = 0, w = 0;
      CropBox box;
      absl::Status st = s->decoder.ReadSize(example.bytes, &h, &w);
      if (st.ok()) st = WindowOf(steps_[0], key, h, w, &box);
      if (!st.ok()) return st;
      absl::StatusOr<ImageView> region =
          s->decoder.DecodeRegion(example.bytes, out_.c, box, &s->buffers[0]);
      if (!region.ok()) return region.status();
      view = *region;
      in_buffer = 0;
      FinishWindow(steps_[0], s, &view, &in_buffer);
      done = 1;
    } else if (example.kind == StoredExample::Kind::kEncoded) {
      int h = 0, w = 0;
      absl::Status decoded = s->decoder.Decode(example.bytes, out_.c, &s->buffers[0], &h, &w);
      if (!decoded.ok()) return decoded;
      view = ImageView::Packed(s->buffers[0].data(), h, w, out_.c);
      in_buffer = 0;
    }
    for (; done < steps_.size(); ++done) {
      absl::Status st = RunStep(steps_[done], key, s, &view, &in_buffer);
      if (!st.ok()) return st;
    }
    if (view.height != out_.h || view.width != out_.w) {
      return absl::InvalidArgumentError(
          absl::StrCat("the image is ", SizeText(view.height, view.width),
                       steps_.empty() ? "" : " after the preprocessing", ", the model takes ",
                       SizeText(out_.h, out_.w), " (model.input_shape ", DimsString(out_), ")",
                       steps_.empty() ? ": add resize and crop steps to dataset.preprocess" : ""));
    }
    WriteFloats(view, out);
    return absl::OkStatus();
  }

 private:
  // `step` on *view; pixels it makes go to the buffer the view is not in.
  absl::Status RunStep(const PlannedStep& step, rng::Key key, TransformScratch* s, ImageView* view,
                       int* in_buffer) const {
    const int h = view->height, w = view->width;
    const auto too_small = [&](int need_h, int need_w) {
      return absl::InvalidArgumentError(absl::StrCat("a ", SizeText(h, w), " image: ", step.field,
                                                     " needs at least ", SizeText(need_h, need_w)));
    };
    const int next = *in_buffer == 0 ? 1 : 0;
    std::vector<uint8_t>& buffer = s->buffers[next];
    switch (step.op) {
      case v1::Preprocess::kResize: {
        const int64_t side = step.shorter_side;
        const int64_t nh = h <= w ? side : side * h / w, nw = h <= w ? side * w / h : side;
        if (nh * nw > kMaxImagePixels) {
          return absl::InvalidArgumentError(
              absl::StrCat("a ", SizeText(h, w), " image: ", step.field, " would make it ",
                           SizeText(nh, nw), ", over ", kMaxImagePixels, " pixels"));
        }
        if (nh == h && nw == w) return absl::OkStatus();
        buffer.resize(nh * nw * view->channels);
        s->resizer.Resize(*view, static_cast<int>(nh), static_cast<int>(nw), buffer.data());
        *view = ImageView::Packed(buffer.data(), nh, nw, view->channels);
        *in_buffer = next;
        return absl::OkStatus();
      }
      case v1::Preprocess::kRandomCrop:
        if (step.padding > 0) {
          const auto [ch, cw] = step.size;
          const int p = step.padding;
          if (h + 2 * p < ch || w + 2 * p < cw) return too_small(ch - 2 * p, cw - 2 * p);
          const CropBox box =
              RandomCropBox(rng::FoldIn(key, step.index), h + 2 * p, w + 2 * p, ch, cw);
          buffer.resize(static_cast<size_t>(ch) * cw * view->channels);
          PaddedCrop(*view, box.top - p, box.left - p, ch, cw, buffer.data());
          *view = ImageView::Packed(buffer.data(), ch, cw, view->channels);
          *in_buffer = next;
          return absl::OkStatus();
        }
        [[fallthrough]];
      case v1::Preprocess::kCenterCrop:
      case v1::Preprocess::kRandomResizedCrop: {
        CropBox box;
        absl::Status st = WindowOf(step, key, h, w, &box);
        if (!st.ok()) return st;
        *view = view->Crop(box.top, box.left, box.height, box.width);
        FinishWindow(step, s, view, in_buffer);
        return absl::OkStatus();
      }
      case v1::Preprocess::kHorizontalFlip:
        if (FlipDraw(rng::FoldIn(key, step.index), step.probability)) *view = view->Mirrored();
        return absl::OkStatus();
      default:
        return absl::InternalError(absl::StrCat(step.field, ": an unknown step"));
    }
  }

  // Whether `step` keeps a window of the image that depends on its size and the key alone
  // (which a JPEG decoder can then decode alone).
  static bool KeepsAWindow(const PlannedStep& step) {
    return step.op == v1::Preprocess::kCenterCrop ||
           step.op == v1::Preprocess::kRandomResizedCrop ||
           (step.op == v1::Preprocess::kRandomCrop && step.padding == 0);
  }

  // The window such a step keeps of an h x w image, or why the image is too small for it.
  absl::Status WindowOf(const PlannedStep& step, rng::Key key, int h, int w, CropBox* box) const {
    const auto [ch, cw] = step.size;
    switch (step.op) {
      case v1::Preprocess::kRandomResizedCrop:
        *box = RandomResizedCropBox(rng::FoldIn(key, step.index), h, w, step.ranges);
        return absl::OkStatus();
      case v1::Preprocess::kCenterCrop:
        if (h < ch || w < cw) break;
        // torchvision: int(round((h - ch) / 2.0)), Python's round (half to even).
        *box = {static_cast<int>(std::nearbyint((h - ch) / 2.0)),
                static_cast<int>(std::nearbyint((w - cw) / 2.0)), ch, cw};
        return absl::OkStatus();
      default:  // random_crop without padding
        if (h < ch || w < cw) break;
        *box = RandomCropBox(rng::FoldIn(key, step.index), h, w, ch, cw);
        return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat("a ", SizeText(h, w), " image: ", step.field,
                                                   " needs at least ", SizeText(ch, cw)));
  }

  // What follows the window: a random resized crop's resize to its size.
  static void FinishWindow(const PlannedStep& step, TransformScratch* s, ImageView* view,
                           int* in_buffer) {
    if (step.op != v1::Preprocess::kRandomResizedCrop) return;
    const auto [ch, cw] = step.size;
    const int next = *in_buffer == 0 ? 1 : 0;
    s->buffers[next].resize(static_cast<size_t>(ch) * cw * view->channels);
    s->resizer.Resize(*view, ch, cw, s->buffers[next].data());
    *view = ImageView::Packed(s->buffers[next].data(), ch, cw, view->channels);
    *in_buffer = next;
  }

  // The window of ch x cw pixels at (top, left) of `in`, zeros outside it, packed into out.
  static void PaddedCrop(const ImageView& in, int top, int left, int ch, int cw, uint8_t* out) {
    const int c = in.channels;
    const int x0 = std::clamp(-left, 0, cw), x1 = std::clamp(in.width - left, x0, cw);
    for (int y = 0; y < ch; ++y) {
      uint8_t* o = out + static_cast<ptrdiff_t>(y) * cw * c;
      const int sy = top + y;
      if (sy < 0 || sy >= in.height) {
        std::memset(o, 0, static_cast<size_t>(cw) * c);
        continue;
      }
      std::memset(o, 0, static_cast<size_t>(x0) * c);
      for (int x = x0; x < x1; ++x) std::memcpy(o + x * c, in.at(sy, left + x), c);
      std::memset(o + x1 * c, 0, static_cast<size_t>(cw - x1) * c);
    }
  }

  // float32(pixel) / 255, normalized, through the per-channel table.
  void WriteFloats(const ImageView& v, float* out) const {
    const int c = v.channels;
    for (int y = 0; y < v.height; ++y) {
      float* o = out + static_cast<ptrdiff_t>(y) * v.width * c;
      for (int x = 0; x < v.width; ++x) {
        const uint8_t* p = v.at(y, x);
        for (int k = 0; k < c; ++k) o[x * c + k] = lut_[k * 256 + p[k]];
      }
    }
  }

  const std::vector<PlannedStep> steps_;
  const Dims out_;
  const std::vector<float> lut_;  // [channel][pixel value]
  bool random_ = false;
  bool first_step_windows_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ImageTransform>> ImageTransform::Create(const v1::DatasetSpec& spec,
                                                                       Split split,
                                                                       Dims output_shape) {
  const bool train = split == Split::kTrain;
  const char* list = train ? "dataset.preprocess" : "dataset.test_preprocess";
  if (output_shape.flat || output_shape.seq) {
    return absl::InvalidArgumentError(absl::StrCat("model.input_shape: ", DimsString(output_shape),
                                                   ": format ", spec.format(),
                                                   " gives images, [H, W, C]"));
  }
  const auto& steps = StepsOf(spec, train);
  const std::optional<CropSize> fixed = FixedOutputSize(steps);
  if (fixed && (fixed->height != output_shape.h || fixed->width != output_shape.w)) {
    return absl::InvalidArgumentError(absl::StrCat(
        list, ": the steps end in ", SizeText(fixed->height, fixed->width),
        " images, but the model takes ", DimsString(output_shape), " (model.input_shape)"));
  }
  std::vector<PlannedStep> plan;
  for (int i = 0; i < steps.size(); ++i) {
    const v1::Preprocess& p = steps[i];
    PlannedStep s{p.op_case(), static_cast<uint32_t>(i)};
    switch (p.op_case()) {
      case v1::Preprocess::kResize:
        s.field = absl::StrCat(list, "[", i, "].resize");
        s.shorter_side = static_cast<int>(p.resize().shorter_side());
        break;
      case v1::Preprocess::kCenterCrop:
        s.field = absl::StrCat(list, "[", i, "].center_crop");
        s.size = CropSizeOf(p.center_crop());
        break;
      case v1::Preprocess::kRandomCrop:
        s.field = absl::StrCat(list, "[", i, "].random_crop");
        s.size = CropSizeOf(p.random_crop());
        s.padding = static_cast<int>(p.random_crop().padding());
        break;
      case v1::Preprocess::kRandomResizedCrop:
        s.field = absl::StrCat(list, "[", i, "].random_resized_crop");
        s.size = CropSizeOf(p.random_resized_crop());
        s.ranges = RangesOf(p.random_resized_crop());
        break;
      case v1::Preprocess::kHorizontalFlip:
        s.field = absl::StrCat(list, "[", i, "].horizontal_flip");
        s.probability = FlipProbability(p.horizontal_flip());
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(list, "[", i, "]: no step set"));
    }
    plan.push_back(std::move(s));
  }
  const v1::Normalization& norm = spec.normalize();
  const int c = output_shape.c;
  const bool normalize = norm.mean_size() > 0;
  if (normalize && (norm.mean_size() != c || norm.std_size() != c)) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.normalize: ", norm.mean_size(),
                                                   " means and ", norm.std_size(),
                                                   " stds for the model's ", c, " input channels"));
  }
  // Dataset::Normalize's arithmetic, one table entry per (channel, pixel value).
  std::vector<float> lut(static_cast<size_t>(c) * 256);
  for (int k = 0; k < c; ++k) {
    for (int v = 0; v < 256; ++v) {
      float x = static_cast<float>(v) / 255.0f;
      if (normalize) x = (x - static_cast<float>(norm.mean(k))) / static_cast<float>(norm.std(k));
      lut[k * 256 + v] = x;
    }
  }
  return std::make_unique<StepTransform>(std::move(plan), output_shape, std::move(lut));
}

absl::Status ReadAndTransform(const ExampleSource& source, const ImageTransform& transform,
                              int64_t index, rng::Key key, ImageTransform::Scratch* scratch,
                              StoredExample* stored, float* out, int64_t* label) {
  absl::Status s = source.Read(index, stored);
  if (!s.ok()) return s;
  s = transform.Apply(*stored, key, scratch, out);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(source.Where(index), ": ", s.message()));
  *label = stored->label;
  return absl::OkStatus();
}

absl::Status CheckSplitFitsModel(const ExampleSource& source, const ImageTransform& transform,
                                 int classes) {
  const ExampleSource::MaxLabel max = source.max_label();
  if (max.label >= classes) {
    return absl::InvalidArgumentError(
        absl::StrCat(source.Where(max.index), ": label ", max.label, " is not in [0, ", classes,
                     "): the model's last layer has ", classes,
                     " outputs (model.layers' last dense features, or the preset's)"));
  }
  if (!source.stored_shape() || source.size() == 0) return absl::OkStatus();
  auto scratch = transform.NewScratch();
  StoredExample stored;
  std::vector<float> out(transform.output_shape().size());
  int64_t label = 0;
  return ReadAndTransform(source, transform, 0, rng::Key{}, scratch.get(), &stored, out.data(),
                          &label);
}

}  // namespace lockstep
