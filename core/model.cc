// Model: a sequential stack of Flax linen layers, with Flax's module names, parameter layout and
// initialization. Contract: model.h.
#include "core/model.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "absl/strings/str_cat.h"
#include "core/rng/flax_rng.h"
#include "core/rng/random.h"

namespace lockstep {

constexpr int kClasses = 10;

std::string DimsString(const Dims& d) {
  if (d.seq) return absl::StrCat("[", d.w, ", ", d.c, "]");
  return d.flat ? absl::StrCat("[", d.c, "]") : absl::StrCat("[", d.h, ", ", d.w, ", ", d.c, "]");
}

Pads PadsFor(int in, int k, int stride, Padding padding) {
  if (padding == Padding::kValid) return {(in - k) / stride + 1, 0, 0};
  const int out = (in + stride - 1) / stride;
  const int total = std::max((out - 1) * stride + k - in, 0);
  return {out, total / 2, total - total / 2};
}

Model Model::Cnn(Dims input) {
  Model m(input);
  m.Conv(32, {3, 3});
  m.Relu();
  m.AvgPool({2, 2}, {2, 2});
  m.Conv(64, {3, 3});
  m.Relu();
  m.AvgPool({2, 2}, {2, 2});
  m.Flatten();
  m.Dense(256);
  m.Relu();
  m.Dense(kClasses);
  return m;
}

Model Model::Mlp(const std::vector<int>& hidden, double dropout_rate, Dims input) {
  Model m(input);
  m.Flatten();
  for (int w : hidden) {
    m.Dense(w);
    m.Relu();
    m.Dropout(dropout_rate);
  }
  m.Dense(kClasses);
  return m;
}

std::string Layer::RngPath() const {
  std::string path = name;
  path.erase(std::remove(path.begin(), path.end(), '/'), path.end());
  return path;
}

std::string Model::NextAutoName(const std::string& cls) const {
  for (const auto& [name, count] : scopes_.back().counters) {
    if (name == cls) return absl::StrCat(cls, "_", count);
  }
  return cls + "_0";
}

bool Model::HasName(const std::string& name) const {
  const auto& names = scopes_.back().names;
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string Model::ModuleName(const std::string& cls, const std::string& name) {
  Scope& scope = scopes_.back();
  std::string local = name;
  if (local.empty()) {
    local = NextAutoName(cls);
    bool counted = false;
    for (auto& [c, count] : scope.counters) {
      if (c == cls) ++count, counted = true;
    }
    if (!counted) scope.counters.push_back({cls, 1});
  }
  scope.names.push_back(local);
  return scope.prefix + local;
}

void Model::BeginModule(const std::string& cls, const std::string& name) {
  const std::string path = ModuleName(cls, name);
  scopes_.push_back(Scope{path + "/"});
}

void Model::EndModule() {
  if (scopes_.size() > 1) scopes_.pop_back();
}

void Model::Append(Layer l) {
  l.src = head_;
  layers_.push_back(std::move(l));
  head_ = static_cast<int>(layers_.size()) - 1;
}

void Model::Add(int other) {
  Layer l{LayerKind::kAdd, "", Last(), Last()};
  l.residual = other;
  Append(l);
}

Layer Model::Windowed(LayerKind kind, std::array<int, 2> size, std::array<int, 2> strides,
                      Padding padding) const {
  Layer l{kind, "", Last(), Last()};
  const Pads ph = PadsFor(l.in.h, size[0], strides[0], padding);
  const Pads pw = PadsFor(l.in.w, size[1], strides[1], padding);
  l.window = {size[0], size[1], strides[0], strides[1], ph.before, ph.after, pw.before, pw.after};
  l.out.h = ph.out;
  l.out.w = pw.out;
  return l;
}

void Model::Conv(int features, std::array<int, 2> kernel_size, std::array<int, 2> strides,
                 Padding padding, bool use_bias, const std::string& name) {
  Layer l = Windowed(LayerKind::kConv, kernel_size, strides, padding);
  l.name = ModuleName("Conv", name);
  l.out.c = features;
  l.kernel = layout_.Add(l.name + "/kernel", {kernel_size[0], kernel_size[1], l.in.c, features});
  if (use_bias) l.bias = layout_.Add(l.name + "/bias", {features});
  Append(l);
}

void Model::Dense(int features, bool use_bias, const std::string& name) {
  // On a sequence, Flax's Dense acts on the last axis, position by position.
  const Dims in = Last();
  const Dims out = in.seq ? Dims{1, in.w, features, false, true} : Dims{1, 1, features, true};
  Layer l{LayerKind::kDense, ModuleName("Dense", name), in, out};
  l.kernel = layout_.Add(l.name + "/kernel", {in.seq ? in.c : in.size(), features});
  if (use_bias) l.bias = layout_.Add(l.name + "/bias", {features});
  Append(l);
}

void Model::LayerNorm(double epsilon, bool use_bias, bool use_scale, const std::string& name) {
  // Flax creates scale, then bias, both over the last axis.
  Layer l{LayerKind::kLayerNorm, ModuleName("LayerNorm", name), Last(), Last()};
  l.epsilon = static_cast<float>(epsilon);
  if (use_scale) l.scale = layout_.Add(l.name + "/scale", {l.in.c});
  if (use_bias) l.bias = layout_.Add(l.name + "/bias", {l.in.c});
  Append(l);
}

void Model::BatchNorm(double momentum, double epsilon, bool use_bias, bool use_scale,
                      const std::string& name) {
  // Flax declares batch_stats mean then var, and creates scale then bias.
  Layer l{LayerKind::kBatchNorm, ModuleName("BatchNorm", name), Last(), Last()};
  l.epsilon = static_cast<float>(epsilon);
  l.momentum = static_cast<float>(momentum);
  l.one_minus_momentum = static_cast<float>(1.0 - momentum);
  l.mean = stats_layout_.Add(l.name + "/mean", {l.in.c});
  l.var = stats_layout_.Add(l.name + "/var", {l.in.c});
  if (use_scale) l.scale = layout_.Add(l.name + "/scale", {l.in.c});
  if (use_bias) l.bias = layout_.Add(l.name + "/bias", {l.in.c});
  Append(l);
}

void Model::Relu() { Append({LayerKind::kRelu, "", Last(), Last()}); }

void Model::Activate(Activation a) {
  Layer l{LayerKind::kActivation, "", Last(), Last()};
  l.activation = a;
  Append(l);
}

void Model::AvgPool(std::array<int, 2> window_shape, std::array<int, 2> strides, Padding padding,
                    bool count_include_pad) {
  Layer l = Windowed(LayerKind::kAvgPool, window_shape, strides, padding);
  l.count_include_pad = count_include_pad;
  Append(l);
}

void Model::MaxPool(std::array<int, 2> window_shape, std::array<int, 2> strides, Padding padding) {
  Append(Windowed(LayerKind::kMaxPool, window_shape, strides, padding));
}

void Model::Flatten() {
  Append({LayerKind::kFlatten, "", Last(), {1, 1, static_cast<int>(Last().size()), true}});
}

void Model::Dropout(double rate, const std::string& name) {
  // Flax names the module even when rate == 0 (it then draws no key).
  Layer l{LayerKind::kDropout, ModuleName("Dropout", name), Last(), Last()};
  l.keep = static_cast<float>(1.0 - rate);
  Append(l);
}

void Model::Embed(int num_embeddings, int features, const std::string& name) {
  const Dims in = Last();
  Layer l{LayerKind::kEmbed, ModuleName("Embed", name), in, {1, in.c, features, false, true}};
  l.kernel = layout_.Add(l.name + "/embedding", {num_embeddings, features});
  Append(l);
}

void Model::PositionEmbed(int max_len, const std::string& name) {
  Layer l{LayerKind::kPositionEmbed, ModuleName("Embed", name), Last(), Last()};
  l.kernel = layout_.Add(l.name + "/embedding", {max_len, l.in.c});
  Append(l);
}

void Model::ToSequence() {
  const Dims in = Last();
  Append({LayerKind::kFlatten, "", in, {1, in.h * in.w, in.c, false, true}});
}

void Model::ClassToken(const std::string& name) {
  // self.param(name, zeros, (1, 1, F)) in the enclosing module: a param of its own scope,
  // no submodule (the name is taken there all the same).
  const Dims in = Last();
  Layer l{LayerKind::kClassToken, "", in, {1, in.w + 1, in.c, false, true}};
  l.kernel = layout_.Add(ModuleName("", name), {1, 1, in.c});
  Append(l);
}

void Model::AddPositionEmbs(double stddev, const std::string& name) {
  Layer l{LayerKind::kPositionEmbed, ModuleName("AddPositionEmbs", name), Last(), Last()};
  l.init_stddev = static_cast<float>(stddev);
  l.kernel = layout_.Add(l.name + "/pos_embedding", {1, l.in.w, l.in.c});
  Append(l);
}

void Model::SequencePool(bool mean) {
  const Dims in = Last();
  Layer l{LayerKind::kSequencePool, "", in, {1, 1, in.c, true}};
  l.pool_mean = mean;
  Append(l);
}

void Model::Attention(int num_heads, int qkv_features, int out_features, double dropout_rate,
                      bool causal, bool use_bias, const std::string& name) {
  const Dims in = Last();
  if (qkv_features == 0) qkv_features = in.c;
  if (out_features == 0) out_features = in.c;
  Layer l{LayerKind::kAttention,
          ModuleName("MultiHeadDotProductAttention", name),
          in,
          {1, in.w, out_features, false, true}};
  l.heads = num_heads;
  l.head_dim = qkv_features / num_heads;
  l.causal = causal;
  l.keep = static_cast<float>(1.0 - dropout_rate);
  const int64_t h = num_heads, d = l.head_dim;
  const char* names[] = {"query", "key", "value"};
  for (int j = 0; j < 3; ++j) {  // DenseGeneral(features=(heads, head_dim)), then out
    const std::string p = absl::StrCat(l.name, "/", names[j]);
    l.kernels[j] = layout_.Add(p + "/kernel", {in.c, h, d});
    if (use_bias) l.biases[j] = layout_.Add(p + "/bias", {h, d});
  }
  l.kernels[3] = layout_.Add(l.name + "/out/kernel", {h, d, out_features});
  if (use_bias) l.biases[3] = layout_.Add(l.name + "/out/bias", {out_features});
  l.kernel = l.kernels[0];
  l.bias = l.biases[0];
  Append(l);
}

int Model::vocabulary() const {
  if (layers_.empty() || layers_[0].kind != LayerKind::kEmbed) return 0;
  return static_cast<int>(layout_.entries()[layers_[0].kernel].shape[0]);
}

double Model::ForwardFlopsPerSample() const {
  double flops = 0;
  for (const Layer& l : layers_) {
    const double out = static_cast<double>(l.out.size());
    switch (l.kind) {
      case LayerKind::kConv:
        flops += 2.0 * out * l.window.kh * l.window.kw * l.in.c;
        break;
      case LayerKind::kDense:
        flops += 2.0 * static_cast<double>(l.in.size()) * l.out.c;
        break;
      case LayerKind::kAttention: {
        const double t = l.in.w, hd = double{1} * l.heads * l.head_dim;
        flops += 2.0 * t * hd * (3.0 * l.in.c + l.out.c) + 4.0 * t * t * hd + 5.0 * l.heads * t * t;
        break;
      }
      case LayerKind::kEmbed:
      case LayerKind::kPositionEmbed:
      case LayerKind::kClassToken:
        flops += out;
        break;
      case LayerKind::kSequencePool:
        flops += static_cast<double>(l.in.size());
        break;
      case LayerKind::kAvgPool:
      case LayerKind::kMaxPool:
        flops += out * l.window.kh * l.window.kw;
        break;
      case LayerKind::kLayerNorm:
      case LayerKind::kBatchNorm:
        flops += 8.0 * out;  // two sums, squares, subtract, scale, shift
        break;
      case LayerKind::kActivation:
        flops += (l.activation == Activation::kGeluTanh ? 8.0 : 4.0) * out;
        break;
      case LayerKind::kRelu:
      case LayerKind::kDropout:
      case LayerKind::kAdd:
        flops += out;
        break;
      case LayerKind::kFlatten:
        break;
    }
  }
  return flops;
}

namespace {

// variance_scaling(1, fan_in, truncated_normal) (lecun_normal) into `out`, in float32 as JAX.
void LecunNormal(rng::Key key, rng::Impl impl, int64_t fan_in, std::span<float> out) {
  const float variance = static_cast<float>(1.0 / static_cast<double>(fan_in));
  const float stddev = std::sqrt(variance) / 0.87962566103423978f;
  rng::TruncatedNormal(key, impl, -2.0f, 2.0f, out);
  for (float& v : out) v *= stddev;
}

}  // namespace

std::vector<float> Model::Init(rng::Key init_key, rng::Impl impl) const {
  std::vector<float> params(layout_.total(), 0.0f);
  auto span = [&](int index) {
    const ParamEntry& e = layout_.entries()[index];
    return std::span<float>(params.data() + e.offset, e.size);
  };
  for (const Layer& l : layers_) {
    if (l.scale >= 0) std::ranges::fill(span(l.scale), 1.0f);  // ones
    if (l.kind == LayerKind::kClassToken) continue;            // zeros
    // make_rng('params') count 1 is the kernel's; the bias's count 2 is drawn but unused.
    if (l.kind == LayerKind::kEmbed || l.kind == LayerKind::kPositionEmbed) {
      // variance_scaling(1, fan_in, normal, out_axis=0) on (num_embeddings, features):
      // fan_in = features; normal * sqrt(variance). AddPositionEmbs: normal(stddev).
      std::span<float> out = span(l.kernel);
      const float variance = static_cast<float>(1.0 / static_cast<double>(l.out.c));
      const float stddev = l.init_stddev > 0 ? l.init_stddev : std::sqrt(variance);
      rng::Normal(rng::FlaxMakeRng(init_key, l.RngPath(), 1), impl, out);
      for (float& v : out) v *= stddev;
    } else if (l.kind == LayerKind::kAttention) {
      // DenseGeneral initializes its kernel flattened to (inputs, outputs): fan_in is F for
      // query, key and value, heads * head_dim for out. A submodule's scope path hashes as
      // the names concatenated (FlaxScopeHash of "MultiHeadDotProductAttention_0query", or
      // "DecoderBlock_0MultiHeadDotProductAttention_0query" in a block).
      const char* names[] = {"query", "key", "value", "out"};
      for (int j = 0; j < 4; ++j) {
        const int64_t fan_in = j < 3 ? l.in.c : int64_t{l.heads} * l.head_dim;
        LecunNormal(rng::FlaxMakeRng(init_key, l.RngPath() + names[j], 1), impl, fan_in,
                    span(l.kernels[j]));
      }
    } else if (l.kernel >= 0) {
      const ParamEntry& k = layout_.entries()[l.kernel];
      int64_t fan_in = 1;
      for (size_t d = 0; d + 1 < k.shape.size(); ++d) fan_in *= k.shape[d];
      LecunNormal(rng::FlaxMakeRng(init_key, l.RngPath(), 1), impl, fan_in, span(l.kernel));
    }
  }
  return params;
}

std::vector<float> Model::InitStats() const {
  std::vector<float> stats(stats_layout_.total(), 0.0f);
  for (const Layer& l : layers_) {
    if (l.var < 0) continue;
    const ParamEntry& v = stats_layout_.entries()[l.var];
    std::fill_n(stats.begin() + v.offset, v.size, 1.0f);
  }
  return stats;
}

}  // namespace lockstep
