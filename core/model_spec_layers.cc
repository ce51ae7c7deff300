// ModelFromSpec's layers (model_spec_internal.h's AddLayer): each kind of layer of the
// spec checked field by field and shape by shape, then appended to the Model.
#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/model_spec_internal.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

using model_spec::BuildContext;
using model_spec::CheckName;
using model_spec::Invalid;
using model_spec::kMaxDim;
using model_spec::kMaxElements;
using model_spec::kMaxFeatures;
using model_spec::kMaxLayers;
using model_spec::List;

// [a, b] from a two-value field, each in [1, kMaxDim]; `fallback` when it is empty and
// there is one.
absl::StatusOr<std::array<int, 2>> Pair(const std::string& field,
                                        const google::protobuf::RepeatedField<uint32_t>& v,
                                        const std::array<int, 2>* fallback, const char* what) {
  if (v.empty() && fallback != nullptr) return *fallback;
  if (v.size() != 2) {
    return Invalid(field, absl::StrCat(List(v), " has ", v.size(), " values; expected ", what));
  }
  for (uint32_t x : v) {
    if (x == 0 || x > kMaxDim) {
      return Invalid(field, absl::StrCat(List(v), ": each value must be in [1, ", kMaxDim, "]"));
    }
  }
  return std::array<int, 2>{static_cast<int>(v[0]), static_cast<int>(v[1])};
}

absl::StatusOr<Padding> ParsePadding(const std::string& field, const std::string& s,
                                     Padding fallback) {
  std::string upper = s;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  if (upper.empty()) return fallback;
  if (upper == "SAME") return Padding::kSame;
  if (upper == "VALID") return Padding::kValid;
  return Invalid(field, absl::StrCat("unknown padding \"", s, "\" (expected SAME or VALID)"));
}

absl::Status CheckFeatures(const std::string& field, uint32_t features) {
  if (features == 0 || features > kMaxFeatures) {
    return Invalid(field, absl::StrCat(features, " is not in [1, ", kMaxFeatures, "]"));
  }
  return absl::OkStatus();
}

// A conv kernel or pool window over `in`: an image, large enough for VALID padding.
absl::Status CheckWindow(const std::string& layer, const char* size_field, Dims in,
                         std::array<int, 2> size, Padding padding) {
  if (in.flat || in.seq) {
    return Invalid(
        layer, absl::StrCat("the input ", DimsString(in),
                            in.seq ? " is a sequence [T, F]" : " is flat (after flatten or dense)",
                            "; this layer needs an image [h, w, c]"));
  }
  if (padding == Padding::kValid && (size[0] > in.h || size[1] > in.w)) {
    return Invalid(absl::StrCat(layer, ".", size_field),
                   absl::StrCat("[", size[0], ", ", size[1], "] is larger than the input ",
                                DimsString(in), " with padding VALID"));
  }
  return absl::OkStatus();
}

absl::Status AddBatchNorm(Model& m, const std::string& at, const v1::BatchNormSpec& s) {
  const std::string field = at + ".batch_norm";
  const double momentum = s.has_momentum() ? s.momentum() : 0.99;
  const double epsilon = s.has_epsilon() ? s.epsilon() : 1e-5;
  if (!(momentum >= 0.0 && momentum < 1.0)) {
    return Invalid(field + ".momentum", absl::StrCat(momentum, " is not in [0, 1)"));
  }
  if (!(epsilon > 0.0 && epsilon < 1.0)) {
    return Invalid(field + ".epsilon", absl::StrCat(epsilon, " is not in (0, 1)"));
  }
  RETURN_IF_ERROR(CheckName(m, field, "BatchNorm", s.name()));
  m.BatchNorm(momentum, epsilon, !s.has_use_bias() || s.use_bias(),
              !s.has_use_scale() || s.use_scale(), s.name());
  return absl::OkStatus();
}

// A conv kernel's or pool window's size, strides and padding, checked against `in`.
struct WindowArgs {
  std::array<int, 2> size, strides;
  Padding padding;
};

absl::StatusOr<WindowArgs> ParseWindow(const std::string& layer, const char* size_field,
                                       const google::protobuf::RepeatedField<uint32_t>& size,
                                       const google::protobuf::RepeatedField<uint32_t>& strides,
                                       const std::string& padding, Padding fallback, Dims in) {
  const std::array<int, 2> ones = {1, 1};
  WindowArgs w;
  ASSIGN_OR_RETURN(w.size, Pair(absl::StrCat(layer, ".", size_field), size, nullptr,
                                size_field[0] == 'k' ? "[kh, kw]" : "[wh, ww]"));
  ASSIGN_OR_RETURN(w.strides, Pair(layer + ".strides", strides, &ones, "[sh, sw]"));
  ASSIGN_OR_RETURN(w.padding, ParsePadding(layer + ".padding", padding, fallback));
  RETURN_IF_ERROR(CheckWindow(layer, size_field, in, w.size, w.padding));
  return w;
}

absl::Status AddConv(Model& m, const std::string& at, const v1::ConvSpec& s) {
  const std::string f = at + ".conv";
  RETURN_IF_ERROR(CheckFeatures(f + ".features", s.features()));
  const Dims in = m.Last();
  ASSIGN_OR_RETURN(WindowArgs w, ParseWindow(f, "kernel_size", s.kernel_size(), s.strides(),
                                             s.padding(), Padding::kSame, in));
  if (int64_t{w.size[0]} * w.size[1] * in.c > kMaxElements) {
    return Invalid(f + ".kernel_size", absl::StrCat("a patch of ", w.size[0], "x", w.size[1], "x",
                                                    in.c, " floats is too large"));
  }
  RETURN_IF_ERROR(CheckName(m, f, "Conv", s.name()));
  m.Conv(static_cast<int>(s.features()), w.size, w.strides, w.padding,
         !s.has_use_bias() || s.use_bias(), s.name());
  return absl::OkStatus();
}

absl::Status AddDense(Model& m, const std::string& at, const v1::DenseSpec& s) {
  RETURN_IF_ERROR(CheckFeatures(at + ".dense.features", s.features()));
  if (!m.Last().flat && !m.Last().seq) {
    return Invalid(at + ".dense", absl::StrCat("the input ", DimsString(m.Last()),
                                               " is not flat; add `- flatten: {}` before it "
                                               "(Flax's Dense would act on the last axis alone)"));
  }
  RETURN_IF_ERROR(CheckName(m, at + ".dense", "Dense", s.name()));
  m.Dense(static_cast<int>(s.features()), !s.has_use_bias() || s.use_bias(), s.name());
  return absl::OkStatus();
}

absl::Status AddLayerNorm(Model& m, const std::string& at, const v1::LayerNormSpec& s) {
  const double epsilon = s.has_epsilon() ? s.epsilon() : 1e-6;
  if (!(epsilon > 0.0 && epsilon < 1.0)) {
    return Invalid(at + ".layer_norm.epsilon", absl::StrCat(epsilon, " is not in (0, 1)"));
  }
  RETURN_IF_ERROR(CheckName(m, at + ".layer_norm", "LayerNorm", s.name()));
  m.LayerNorm(epsilon, !s.has_use_bias() || s.use_bias(), !s.has_use_scale() || s.use_scale(),
              s.name());
  return absl::OkStatus();
}

absl::Status AddDropout(Model& m, const std::string& at, const v1::DropoutSpec& s) {
  if (!(s.rate() >= 0.0 && s.rate() < 1.0)) {
    return Invalid(at + ".dropout.rate", absl::StrCat(s.rate(), " is not in [0, 1)"));
  }
  RETURN_IF_ERROR(CheckName(m, at + ".dropout", "Dropout", s.name()));
  m.Dropout(s.rate(), s.name());
  return absl::OkStatus();
}

absl::Status AddEmbed(Model& m, const std::string& at, const v1::EmbedSpec& s) {
  const std::string f = at + ".embed";
  if (!m.layers().empty() || !m.input().flat) {
    return Invalid(f, absl::StrCat("takes token ids: it must be the first layer, on "
                                   "model.input_shape [T] (the input is ",
                                   DimsString(m.Last()), ")"));
  }
  if (s.num_embeddings() == 0 || s.num_embeddings() > (1u << 24)) {
    return Invalid(f + ".num_embeddings",
                   absl::StrCat(s.num_embeddings(), " is not in [1, 16777216]"));
  }
  RETURN_IF_ERROR(CheckFeatures(f + ".features", s.features()));
  RETURN_IF_ERROR(CheckName(m, f, "Embed", s.name()));
  m.Embed(static_cast<int>(s.num_embeddings()), static_cast<int>(s.features()), s.name());
  return absl::OkStatus();
}

absl::Status NeedSequence(const std::string& field, Dims in) {
  if (in.seq) return absl::OkStatus();
  return Invalid(field, absl::StrCat("the input ", DimsString(in),
                                     " is not a sequence [T, F] (start with an embed layer, or "
                                     "make an image's pixels tokens with to_sequence)"));
}

absl::Status AddPositionEmbed(Model& m, const std::string& at, const v1::PositionEmbedSpec& s) {
  const std::string f = at + ".position_embed";
  RETURN_IF_ERROR(NeedSequence(f, m.Last()));
  const int t = m.Last().w;
  const uint32_t max_len = s.max_len() == 0 ? static_cast<uint32_t>(t) : s.max_len();
  if (max_len < static_cast<uint32_t>(t) || max_len > kMaxFeatures) {
    return Invalid(f + ".max_len", absl::StrCat(max_len, " is not in [T, 1048576] for the input ",
                                                DimsString(m.Last())));
  }
  RETURN_IF_ERROR(CheckName(m, f, "Embed", s.name()));
  m.PositionEmbed(static_cast<int>(max_len), s.name());
  return absl::OkStatus();
}

absl::Status AddToSequence(Model& m, const std::string& at) {
  const Dims in = m.Last();
  if (in.flat || in.seq) {
    return Invalid(at + ".to_sequence",
                   absl::StrCat("the input ", DimsString(in), " is not an image [h, w, c]"));
  }
  m.ToSequence();
  return absl::OkStatus();
}

absl::Status AddClassToken(Model& m, const std::string& at, const v1::ClassTokenSpec& s) {
  const std::string f = at + ".class_token";
  RETURN_IF_ERROR(NeedSequence(f, m.Last()));
  if (static_cast<uint32_t>(m.Last().w) + 1 > kMaxFeatures) {
    return Invalid(f, absl::StrCat("the input ", DimsString(m.Last()), " has too many positions"));
  }
  const std::string name = s.name().empty() ? "cls" : s.name();
  RETURN_IF_ERROR(CheckName(m, f, "", name));
  m.ClassToken(name);
  return absl::OkStatus();
}

absl::Status AddPositionEmbs(Model& m, const std::string& at, const v1::AddPositionEmbsSpec& s) {
  const std::string f = at + ".add_position_embs";
  RETURN_IF_ERROR(NeedSequence(f, m.Last()));
  const double stddev = s.has_stddev() ? s.stddev() : 0.02;
  if (!(stddev > 0.0 && stddev <= 1e6)) {
    return Invalid(f + ".stddev", absl::StrCat(stddev, " is not in (0, 1e6]"));
  }
  RETURN_IF_ERROR(CheckName(m, f, "AddPositionEmbs", s.name()));
  m.AddPositionEmbs(stddev, s.name());
  return absl::OkStatus();
}

absl::Status AddSequencePool(Model& m, const std::string& at, const v1::SequencePoolSpec& s) {
  const std::string f = at + ".sequence_pool";
  RETURN_IF_ERROR(NeedSequence(f, m.Last()));
  if (s.method() != "first" && s.method() != "mean") {
    return Invalid(
        f + ".method",
        absl::StrCat(s.method().empty() ? "missing" : "unknown method \"" + s.method() + "\"",
                     " (expected first: x[:, 0], the class token's position; or "
                     "mean: jnp.mean(x, axis=1))"));
  }
  m.SequencePool(s.method() == "mean");
  return absl::OkStatus();
}

absl::Status AddAttention(Model& m, const std::string& at, const v1::MultiHeadAttentionSpec& s) {
  const std::string f = at + ".multi_head_attention";
  const Dims in = m.Last();
  RETURN_IF_ERROR(NeedSequence(f, in));
  const uint32_t qkv = s.qkv_features() == 0 ? static_cast<uint32_t>(in.c) : s.qkv_features();
  const uint32_t out = s.out_features() == 0 ? static_cast<uint32_t>(in.c) : s.out_features();
  RETURN_IF_ERROR(CheckFeatures(f + ".qkv_features", qkv));
  RETURN_IF_ERROR(CheckFeatures(f + ".out_features", out));
  if (s.num_heads() == 0 || qkv % s.num_heads() != 0) {
    return Invalid(f + ".num_heads", absl::StrCat(s.num_heads(), " does not divide qkv_features ",
                                                  qkv, " (heads of equal depth)"));
  }
  if (!(s.dropout_rate() >= 0.0 && s.dropout_rate() < 1.0)) {
    return Invalid(f + ".dropout_rate", absl::StrCat(s.dropout_rate(), " is not in [0, 1)"));
  }
  if (int64_t{s.num_heads()} * in.w * in.w > kMaxElements) {
    return Invalid(f, absl::StrCat("the attention weights of ", s.num_heads(), " heads over ", in.w,
                                   " positions are too large"));
  }
  RETURN_IF_ERROR(CheckName(m, f, "MultiHeadDotProductAttention", s.name()));
  m.Attention(static_cast<int>(s.num_heads()), static_cast<int>(qkv), static_cast<int>(out),
              s.dropout_rate(), s.causal(), !s.has_use_bias() || s.use_bias(), s.name());
  return absl::OkStatus();
}

absl::Status AddOne(Model& m, const std::string& at, const v1::LayerSpec& spec, BuildContext& ctx) {
  switch (spec.layer_case()) {
    case v1::LayerSpec::kBlock:
      return model_spec::AddBlock(m, at, spec.block(), ctx);
    case v1::LayerSpec::kResidual:
      return model_spec::AddResidual(m, at, spec.residual(), ctx);
    case v1::LayerSpec::kConv:
      return AddConv(m, at, spec.conv());
    case v1::LayerSpec::kDense:
      return AddDense(m, at, spec.dense());
    case v1::LayerSpec::kBatchNorm:
      return AddBatchNorm(m, at, spec.batch_norm());
    case v1::LayerSpec::kLayerNorm:
      return AddLayerNorm(m, at, spec.layer_norm());
    case v1::LayerSpec::kRelu:
      m.Relu();
      return absl::OkStatus();
    case v1::LayerSpec::kGelu:
      m.Activate(!spec.gelu().has_approximate() || spec.gelu().approximate()
                     ? Activation::kGeluTanh
                     : Activation::kGeluErf);
      return absl::OkStatus();
    case v1::LayerSpec::kTanh:
      m.Activate(Activation::kTanh);
      return absl::OkStatus();
    case v1::LayerSpec::kSigmoid:
      m.Activate(Activation::kSigmoid);
      return absl::OkStatus();
    case v1::LayerSpec::kSilu:
      m.Activate(Activation::kSilu);
      return absl::OkStatus();
    case v1::LayerSpec::kAvgPool: {
      const v1::AvgPoolSpec& s = spec.avg_pool();
      ASSIGN_OR_RETURN(WindowArgs w,
                       ParseWindow(at + ".avg_pool", "window_shape", s.window_shape(), s.strides(),
                                   s.padding(), Padding::kValid, m.Last()));
      m.AvgPool(w.size, w.strides, w.padding, !s.has_count_include_pad() || s.count_include_pad());
      return absl::OkStatus();
    }
    case v1::LayerSpec::kMaxPool: {
      const v1::MaxPoolSpec& s = spec.max_pool();
      ASSIGN_OR_RETURN(WindowArgs w,
                       ParseWindow(at + ".max_pool", "window_shape", s.window_shape(), s.strides(),
                                   s.padding(), Padding::kValid, m.Last()));
      m.MaxPool(w.size, w.strides, w.padding);
      return absl::OkStatus();
    }
    case v1::LayerSpec::kFlatten:
      m.Flatten();
      return absl::OkStatus();
    case v1::LayerSpec::kDropout:
      return AddDropout(m, at, spec.dropout());
    case v1::LayerSpec::kEmbed:
      return AddEmbed(m, at, spec.embed());
    case v1::LayerSpec::kPositionEmbed:
      return AddPositionEmbed(m, at, spec.position_embed());
    case v1::LayerSpec::kMultiHeadAttention:
      return AddAttention(m, at, spec.multi_head_attention());
    case v1::LayerSpec::kToSequence:
      return AddToSequence(m, at);
    case v1::LayerSpec::kClassToken:
      return AddClassToken(m, at, spec.class_token());
    case v1::LayerSpec::kAddPositionEmbs:
      return AddPositionEmbs(m, at, spec.add_position_embs());
    case v1::LayerSpec::kSequencePool:
      return AddSequencePool(m, at, spec.sequence_pool());
    case v1::LayerSpec::LAYER_NOT_SET:
      break;
  }
  return Invalid(at, "empty: name one layer (conv, dense, relu, max_pool, flatten...)");
}

// The dtype field of a module's (or block call's) spec; null for functions.
const std::string* ModuleDtype(const v1::LayerSpec& spec) {
  switch (spec.layer_case()) {
    case v1::LayerSpec::kConv:
      return &spec.conv().dtype();
    case v1::LayerSpec::kDense:
      return &spec.dense().dtype();
    case v1::LayerSpec::kBatchNorm:
      return &spec.batch_norm().dtype();
    case v1::LayerSpec::kLayerNorm:
      return &spec.layer_norm().dtype();
    case v1::LayerSpec::kEmbed:
      return &spec.embed().dtype();
    case v1::LayerSpec::kPositionEmbed:
      return &spec.position_embed().dtype();
    case v1::LayerSpec::kMultiHeadAttention:
      return &spec.multi_head_attention().dtype();
    case v1::LayerSpec::kBlock:
      return &spec.block().dtype();
    default:
      return nullptr;
  }
}

}  // namespace

namespace model_spec {

absl::StatusOr<DType> ParseDtype(const std::string& field, const std::string& s, DType fallback) {
  if (s.empty()) return fallback;
  if (s == "float32") return DType::kFloat32;
  if (s == "bfloat16") return DType::kBfloat16;
  return Invalid(field, absl::StrCat("unknown dtype \"", s, "\" (expected float32 or bfloat16)"));
}

absl::Status AddLayer(Model& m, const std::string& at, const v1::LayerSpec& spec,
                      BuildContext& ctx) {
  // A module's (or block's) own dtype holds for it (and a block's modules), then the
  // enclosing one again.
  const DType outer = m.dtype();
  if (const std::string* dtype = ModuleDtype(spec); dtype != nullptr) {
    const std::string kind =
        v1::LayerSpec::descriptor()->FindFieldByNumber(spec.layer_case())->name();
    ASSIGN_OR_RETURN(const DType d,
                     ParseDtype(absl::StrCat(at, ".", kind, ".dtype"), *dtype, outer));
    m.set_dtype(d);
  }
  const absl::Status added = AddOne(m, at, spec, ctx);
  m.set_dtype(outer);
  RETURN_IF_ERROR(added);
  if (m.layers().size() > static_cast<size_t>(kMaxLayers)) {
    return Invalid(
        at, absl::StrCat("the model has more than ", kMaxLayers, " layers (blocks expanded)"));
  }
  const Dims out = m.Last();
  if (out.size() > kMaxElements) {
    return Invalid(at, absl::StrCat("its output ", DimsString(out), " is too large"));
  }
  return absl::OkStatus();
}

}  // namespace model_spec

}  // namespace lockstep
