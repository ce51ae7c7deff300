#include "core/model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/rng/flax_rng.h"
#include "core/rng/random.h"

namespace lockstep {

constexpr int kImageSize = 28;
constexpr int kClasses = 10;

absl::StatusOr<Model> Model::FromSpec(const v1::ModelSpec& spec) {
  if (spec.kind() == "cnn") {
    if (spec.hidden_size() > 0 || spec.dropout_rate() != 0) {
      return absl::InvalidArgumentError(
          "model.hidden, model.dropout_rate: only apply to model.kind \"mlp\"");
    }
    return Cnn();
  }
  if (spec.kind() == "mlp") {
    if (spec.hidden_size() == 0) {
      return absl::InvalidArgumentError("model.hidden: an mlp needs at least one width");
    }
    std::vector<int> hidden;
    for (int i = 0; i < spec.hidden_size(); ++i) {
      if (spec.hidden(i) == 0 || spec.hidden(i) > (1u << 20)) {
        return absl::InvalidArgumentError(
            absl::StrCat("model.hidden[", i, "]: ", spec.hidden(i), " is not in [1, 2^20]"));
      }
      hidden.push_back(static_cast<int>(spec.hidden(i)));
    }
    const double rate = spec.dropout_rate();
    if (!(rate >= 0.0 && rate < 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.dropout_rate: ", rate, " is not in [0, 1)"));
    }
    return Mlp(hidden, rate);
  }
  return absl::InvalidArgumentError(absl::StrCat("model.kind: unknown model \"", spec.kind(),
                                                 "\" (expected \"cnn\" or \"mlp\")"));
}

Model Model::Cnn() {
  Model m({kImageSize, kImageSize, 1});
  m.Conv(32, 3);
  m.Relu();
  m.AvgPool();
  m.Conv(64, 3);
  m.Relu();
  m.AvgPool();
  m.Flatten();
  m.Dense(256);
  m.Relu();
  m.Dense(kClasses);
  return m;
}

Model Model::Mlp(const std::vector<int>& hidden, double dropout_rate) {
  Model m({kImageSize, kImageSize, 1});
  m.Flatten();
  for (int w : hidden) {
    m.Dense(w);
    m.Relu();
    m.Dropout(dropout_rate);
  }
  m.Dense(kClasses);
  return m;
}

std::string Model::AutoName(const std::string& cls) {
  for (auto& [name, count] : counters_) {
    if (name == cls) return absl::StrCat(cls, "_", count++);
  }
  counters_.push_back({cls, 1});
  return cls + "_0";
}

void Model::Conv(int features, int kernel_size) {
  Layer l{LayerKind::kConv, AutoName("Conv"), Last(), Last()};
  l.out.c = features;
  l.kernel_size = kernel_size;
  l.kernel = layout_.Add(l.name + "/kernel", {kernel_size, kernel_size, l.in.c, features});
  l.bias = layout_.Add(l.name + "/bias", {features});
  layers_.push_back(l);
}

void Model::Dense(int features) {
  Layer l{LayerKind::kDense, AutoName("Dense"), Last(), {1, 1, features}};
  l.kernel = layout_.Add(l.name + "/kernel", {l.in.size(), features});
  l.bias = layout_.Add(l.name + "/bias", {features});
  layers_.push_back(l);
}

void Model::Relu() { layers_.push_back({LayerKind::kRelu, "", Last(), Last()}); }

void Model::AvgPool() {
  Layer l{LayerKind::kAvgPool, "", Last(), Last()};
  l.out.h /= 2;
  l.out.w /= 2;
  layers_.push_back(l);
}

void Model::Flatten() {
  layers_.push_back({LayerKind::kFlatten, "", Last(), {1, 1, static_cast<int>(Last().size())}});
}

void Model::Dropout(double rate) {
  // Flax names the module even when rate == 0 (it then draws no key).
  Layer l{LayerKind::kDropout, AutoName("Dropout"), Last(), Last()};
  l.keep = static_cast<float>(1.0 - rate);
  layers_.push_back(l);
}

double Model::ForwardFlopsPerSample() const {
  double flops = 0;
  for (const Layer& l : layers_) {
    if (l.kind == LayerKind::kConv) {
      flops += 2.0 * l.out.size() * l.kernel_size * l.kernel_size * l.in.c;
    } else if (l.kind == LayerKind::kDense) {
      flops += 2.0 * l.in.size() * l.out.c;
    }
  }
  return flops;
}

std::vector<float> Model::Init(rng::Key init_key, rng::Impl impl) const {
  std::vector<float> params(layout_.total(), 0.0f);
  for (const Layer& l : layers_) {
    if (l.kernel < 0) continue;
    const ParamEntry& k = layout_.entries()[l.kernel];
    // lecun_normal: variance_scaling(1, fan_in, truncated_normal), in float32 as JAX.
    int64_t fan_in = 1;
    for (size_t d = 0; d + 1 < k.shape.size(); ++d) fan_in *= k.shape[d];
    const float variance = static_cast<float>(1.0 / static_cast<double>(fan_in));
    const float stddev = std::sqrt(variance) / 0.87962566103423978f;
    // make_rng('params') count 1 is the kernel's; the bias's count 2 is drawn but unused.
    std::span<float> out(params.data() + k.offset, k.size);
    rng::TruncatedNormal(rng::FlaxMakeRng(init_key, l.name, 1), impl, -2.0f, 2.0f, out);
    for (float& v : out) v *= stddev;
  }
  return params;
}

}  // namespace lockstep
