// ModelFromSpec: a spec's model (a preset or a list of layers) into a Model. Every field
// and every shape is checked on the way, so that a bad model is INVALID_ARGUMENT naming
// the field (model.layers[3].dense.features) and the shapes involved, before a worker
// allocates anything. The layers: model_spec_layers.cc; blocks and residuals:
// model_spec_blocks.cc.
#include "core/model_spec.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/model_spec_internal.h"
#include "core/status_macros.h"

namespace lockstep {
namespace model_spec {

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

bool IsName(const std::string& s) {
  if (s.empty() || s.size() > 128 || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(),
                     [](unsigned char c) { return std::isalnum(c) || c == '_'; });
}

absl::Status CheckName(const Model& m, const std::string& field, const std::string& cls,
                       const std::string& name) {
  if (!name.empty() && !IsName(name)) {
    return Invalid(field + ".name",
                   absl::StrCat("\"", name, "\" is not a name ([A-Za-z_][A-Za-z0-9_]*)"));
  }
  const std::string local = name.empty() ? m.NextAutoName(cls) : name;
  if (m.HasName(local)) {
    return Invalid(name.empty() ? field : field + ".name",
                   absl::StrCat("the module name \"", local,
                                "\" is taken in this scope (Flax: NameInUseError)"));
  }
  return absl::OkStatus();
}

std::string List(const google::protobuf::RepeatedField<uint32_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

}  // namespace model_spec

namespace {

using model_spec::BuildContext;
using model_spec::Invalid;
using model_spec::kMaxDim;
using model_spec::kMaxElements;
using model_spec::kMaxFeatures;
using model_spec::kMaxLayers;
using model_spec::List;

absl::StatusOr<Dims> InputShape(const v1::ModelSpec& spec) {
  if (spec.input_shape().empty()) return Dims{28, 28, 1};
  const auto& s = spec.input_shape();
  if (s.size() == 1) {  // token ids [T] (or any flat input)
    if (s[0] == 0 || s[0] > kMaxFeatures) {
      return Invalid("model.input_shape",
                     absl::StrCat(List(s), ": the value must be in [1, ", kMaxFeatures, "]"));
    }
    return Dims{1, 1, static_cast<int>(s[0]), true};
  }
  if (s.size() != 3) {
    return Invalid("model.input_shape",
                   absl::StrCat(List(s), " has ", s.size(), " values; expected [H, W, C] or [T]"));
  }
  for (uint32_t x : s) {
    if (x == 0 || x > kMaxDim) {
      return Invalid("model.input_shape",
                     absl::StrCat(List(s), ": each value must be in [1, ", kMaxDim, "]"));
    }
  }
  const Dims d{static_cast<int>(s[0]), static_cast<int>(s[1]), static_cast<int>(s[2])};
  if (d.size() > kMaxElements) {
    return Invalid("model.input_shape", absl::StrCat(List(s), " is too large"));
  }
  return d;
}

v1::LayerSpec Dense(uint32_t features) {
  v1::LayerSpec l;
  l.mutable_dense()->set_features(features);
  return l;
}

v1::LayerSpec Relu() {
  v1::LayerSpec l;
  l.mutable_relu();
  return l;
}

// The presets as layer lists (Model::Cnn and Model::Mlp build the same).
absl::StatusOr<v1::ModelSpec> ExpandPreset(const v1::ModelSpec& spec) {
  v1::ModelSpec out;
  *out.mutable_input_shape() = spec.input_shape();
  out.set_dtype(spec.dtype());
  auto* layers = out.mutable_layers();
  if (spec.kind() == "cnn") {
    if (spec.hidden_size() > 0 || spec.dropout_rate() != 0) {
      return absl::InvalidArgumentError(
          "model.hidden, model.dropout_rate: only apply to model.kind \"mlp\"");
    }
    for (uint32_t features : {32, 64}) {
      v1::ConvSpec* conv = layers->Add()->mutable_conv();
      conv->set_features(features);
      conv->add_kernel_size(3);
      conv->add_kernel_size(3);
      *layers->Add() = Relu();
      v1::AvgPoolSpec* pool = layers->Add()->mutable_avg_pool();
      for (int d = 0; d < 2; ++d) pool->add_window_shape(2), pool->add_strides(2);
    }
    layers->Add()->mutable_flatten();
    *layers->Add() = Dense(256);
    *layers->Add() = Relu();
    *layers->Add() = Dense(10);
    return out;
  }
  if (spec.kind() == "mlp") {
    if (spec.hidden_size() == 0) {
      return absl::InvalidArgumentError("model.hidden: an mlp needs at least one width");
    }
    const double rate = spec.dropout_rate();
    if (!(rate >= 0.0 && rate < 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.dropout_rate: ", rate, " is not in [0, 1)"));
    }
    layers->Add()->mutable_flatten();
    for (int i = 0; i < spec.hidden_size(); ++i) {
      if (spec.hidden(i) == 0 || spec.hidden(i) > kMaxFeatures) {
        return absl::InvalidArgumentError(
            absl::StrCat("model.hidden[", i, "]: ", spec.hidden(i), " is not in [1, 2^20]"));
      }
      *layers->Add() = Dense(spec.hidden(i));
      *layers->Add() = Relu();
      layers->Add()->mutable_dropout()->set_rate(rate);
    }
    *layers->Add() = Dense(10);
    return out;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("model.kind: unknown model \"", spec.kind(),
                   "\" (expected \"cnn\" or \"mlp\", or a list of model.layers)"));
}

// The layers in `spec` on inputs of `input`.
absl::StatusOr<Model> Build(const v1::ModelSpec& spec, Dims input) {
  if (spec.layers_size() > kMaxLayers) {
    return Invalid("model.layers",
                   absl::StrCat(spec.layers_size(), " layers exceed the limit of ", kMaxLayers));
  }
  Model m(input);
  ASSIGN_OR_RETURN(const DType dtype,
                   model_spec::ParseDtype("model.dtype", spec.dtype(), DType::kFloat32));
  m.set_dtype(dtype);
  BuildContext ctx{&spec};
  for (const auto& [name, block] : spec.blocks()) {
    if (!model_spec::IsName(name)) {
      return Invalid("model.blocks",
                     absl::StrCat("\"", name, "\" is not a class name ([A-Za-z_][A-Za-z0-9_]*)"));
    }
  }
  for (int i = 0; i < spec.layers_size(); ++i) {
    RETURN_IF_ERROR(
        model_spec::AddLayer(m, absl::StrCat("model.layers[", i, "]"), spec.layers(i), ctx));
  }
  const bool params = m.layout().total() > 0;
  const Dims out = m.Last();
  if (!(out.flat || out.seq) || out.c < 2) {
    return Invalid("model.layers",
                   absl::StrCat("the output is ", DimsString(out),
                                "; the last layer must give flat logits [classes] or per-position "
                                "logits [T, classes] with at least 2 classes (end with flatten or "
                                "dense)"));
  }
  if (!params) return Invalid("model.layers", "no layer has parameters to train");
  return m;
}

}  // namespace

absl::StatusOr<Model> ModelFromSpec(const v1::ModelSpec& spec) {
  ASSIGN_OR_RETURN(const Dims input, InputShape(spec));
  if (!spec.param_dtype().empty() && spec.param_dtype() != "float32") {
    return Invalid("model.param_dtype",
                   absl::StrCat("\"", spec.param_dtype(),
                                "\" is not supported: params, the optimizer state and checkpoints "
                                "stay float32 (Flax's param_dtype=jnp.float32); set model.dtype: "
                                "bfloat16 to compute in bfloat16"));
  }
  RETURN_IF_ERROR(model_spec::ParseDtype("model.dtype", spec.dtype(), DType::kFloat32).status());
  if (!spec.blocks().empty() && spec.layers().empty()) {
    return Invalid("model.blocks", "blocks are used from model.layers (`- block: {module: ...}`)");
  }
  if (!spec.layers().empty()) {
    if (!spec.kind().empty() || spec.hidden_size() > 0 || spec.dropout_rate() != 0) {
      return Invalid("model.kind, model.layers",
                     "set a preset (kind, hidden, dropout_rate) or a list of layers, not both");
    }
    return Build(spec, input);
  }
  ASSIGN_OR_RETURN(const v1::ModelSpec expanded, ExpandPreset(spec));
  absl::StatusOr<Model> m = Build(expanded, input);
  if (!m.ok()) {  // only an input_shape can make a preset fail
    return Invalid("model.input_shape",
                   absl::StrCat(DimsString(input), " does not fit model.kind \"", spec.kind(),
                                "\": ", m.status().message()));
  }
  return m;
}

}  // namespace lockstep
