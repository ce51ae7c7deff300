// ModelFromSpec's named blocks and residual connections (docs/models.md, "Blocks and
// residual connections"). A block is a Flax module class: its layers, untyped JSON in the
// spec with "$arg" placeholders, are read as LayerSpec once a call has filled in its args,
// and built in a module scope of their own. A residual connection builds x + layers(x) as
// a branch of the model's graph, projecting x where the shapes differ.
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/model_spec_internal.h"
#include "core/status_macros.h"

namespace lockstep::model_spec {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

std::vector<std::string> SortedKeys(const Struct& s) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : s.fields()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  return keys;
}

// Replaces every string "$name" in `v` by args[name].
absl::Status Substitute(Value& v, const Struct& args, const std::string& block,
                        const std::string& at) {
  if (v.has_string_value() && !v.string_value().empty() && v.string_value()[0] == '$') {
    const std::string name = v.string_value().substr(1);
    auto it = args.fields().find(name);
    if (it == args.fields().end()) {
      return Invalid(at, absl::StrCat("\"$", name, "\" is not an argument of ", block,
                                      " (its args: ", absl::StrJoin(SortedKeys(args), ", "), ")"));
    }
    v = it->second;
    return absl::OkStatus();
  }
  if (v.has_struct_value()) {
    for (auto& [k, field] : *v.mutable_struct_value()->mutable_fields()) {
      RETURN_IF_ERROR(Substitute(field, args, block, absl::StrCat(at, ".", k)));
    }
  } else if (v.has_list_value()) {
    for (int i = 0; i < v.list_value().values_size(); ++i) {
      RETURN_IF_ERROR(Substitute(*v.mutable_list_value()->mutable_values(i), args, block,
                                 absl::StrCat(at, "[", i, "]")));
    }
  }
  return absl::OkStatus();
}

absl::Status NormalizeLayer(Value& v, const std::string& at);

// A list of layers (JSON) at `at`, each normalized.
absl::Status NormalizeLayerList(Value& v, const std::string& at) {
  if (!v.has_list_value()) return absl::OkStatus();  // a type error: the parse reports it
  for (int i = 0; i < v.list_value().values_size(); ++i) {
    RETURN_IF_ERROR(
        NormalizeLayer(*v.mutable_list_value()->mutable_values(i), absl::StrCat(at, "[", i, "]")));
  }
  return absl::OkStatus();
}

// One layer entry as model.layers takes it: `relu` and `relu: null` become `relu: {}`.
absl::Status NormalizeLayer(Value& v, const std::string& at) {
  if (v.has_string_value()) {
    const std::string kind = v.string_value();
    v.mutable_struct_value()->mutable_fields()->clear();
    (*v.mutable_struct_value()->mutable_fields())[kind].mutable_struct_value();
  }
  if (!v.has_struct_value() || v.struct_value().fields().empty()) {
    return Invalid(at, "empty: name one layer (conv, dense, relu, block, residual...)");
  }
  if (v.struct_value().fields_size() != 1) {
    return Invalid(at, absl::StrCat("one layer per entry, found ", v.struct_value().fields_size(),
                                    " (", absl::StrJoin(SortedKeys(v.struct_value()), ", "), ")"));
  }
  auto& [kind, options] = *v.mutable_struct_value()->mutable_fields()->begin();
  if (options.has_null_value()) options.mutable_struct_value();
  if (kind == "residual" && options.has_struct_value()) {
    for (const char* list : {"layers", "projection"}) {
      auto& fields = *options.mutable_struct_value()->mutable_fields();
      auto it = fields.find(list);
      if (it != fields.end()) {
        RETURN_IF_ERROR(NormalizeLayerList(it->second, absl::StrCat(at, ".residual.", list)));
      }
    }
  }
  return absl::OkStatus();
}

// Unknown fields, by their path (protobuf's own errors do not always say where).
absl::Status CheckFields(const Value& v, const google::protobuf::Descriptor* d,
                         const std::string& at) {
  if (!v.has_struct_value()) return absl::OkStatus();
  for (const auto& [key, value] : v.struct_value().fields()) {
    const google::protobuf::FieldDescriptor* f = d->FindFieldByName(key);
    if (f == nullptr) f = d->FindFieldByCamelcaseName(key);
    const std::string where = absl::StrCat(at, ".", key);
    if (f == nullptr) {
      std::vector<std::string> known;
      for (int i = 0; i < d->field_count(); ++i) known.push_back(d->field(i)->name());
      return Invalid(where,
                     absl::StrCat("unknown field (known here: ", absl::StrJoin(known, ", "), ")"));
    }
    if (f->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE || f->is_map() ||
        f->message_type()->file()->package() == "google.protobuf") {
      continue;
    }
    if (!f->is_repeated()) {
      RETURN_IF_ERROR(CheckFields(value, f->message_type(), where));
    } else if (value.has_list_value()) {
      for (int i = 0; i < value.list_value().values_size(); ++i) {
        RETURN_IF_ERROR(CheckFields(value.list_value().values(i), f->message_type(),
                                    absl::StrCat(where, "[", i, "]")));
      }
    }
  }
  return absl::OkStatus();
}

// Layer `raw` of a block (at `at`) with the call's args filled in, as a LayerSpec.
absl::StatusOr<v1::LayerSpec> ReadBlockLayer(const Value& raw, const Struct& args,
                                             const std::string& block, const std::string& at) {
  Value v = raw;
  RETURN_IF_ERROR(Substitute(v, args, block, at));
  RETURN_IF_ERROR(NormalizeLayer(v, at));
  RETURN_IF_ERROR(CheckFields(v, v1::LayerSpec::descriptor(), at));
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(v, &json).ok()) {
    return Invalid(at, "cannot be written as JSON");
  }
  v1::LayerSpec layer;
  const auto st = google::protobuf::util::JsonStringToMessage(json, &layer);
  if (!st.ok()) {
    return Invalid(at, absl::StrCat(std::string(st.message().data(), st.message().size()), " (in ",
                                    json, ")"));
  }
  return layer;
}

// The block's args with the call's values over their defaults; all set.
absl::StatusOr<Struct> CallArgs(const std::string& field, const std::string& block,
                                const v1::BlockSpec& def, const v1::BlockCallSpec& call) {
  Struct args = def.args();
  for (const auto& [key, value] : call.args().fields()) {
    if (!def.args().fields().contains(key)) {
      return Invalid(absl::StrCat(field, ".args.", key),
                     absl::StrCat("not an argument of ", block, " (its args: ",
                                  absl::StrJoin(SortedKeys(def.args()), ", "), ")"));
    }
    (*args.mutable_fields())[key] = value;
  }
  for (const std::string& key : SortedKeys(args)) {
    if (args.fields().at(key).has_null_value()) {
      return Invalid(
          absl::StrCat(field, ".args.", key),
          absl::StrCat("required by ", block, " (model.blocks.", block, ".args has no default)"));
    }
  }
  return args;
}

absl::Status AddBlockLayers(Model& m, const std::string& block, const v1::BlockSpec& def,
                            const Struct& args, BuildContext& ctx) {
  const std::string at = absl::StrCat("model.blocks.", block, ".layers");
  if (def.layers().values().empty()) return Invalid(at, "empty: a block needs layers");
  for (int i = 0; i < def.layers().values_size(); ++i) {
    const std::string layer_at = absl::StrCat(at, "[", i, "]");
    ASSIGN_OR_RETURN(v1::LayerSpec layer,
                     ReadBlockLayer(def.layers().values(i), args, block, layer_at));
    RETURN_IF_ERROR(AddLayer(m, layer_at, layer, ctx));
  }
  return absl::OkStatus();
}

bool SameShape(Dims a, Dims b) {
  return a.h == b.h && a.w == b.w && a.c == b.c && a.flat == b.flat && a.seq == b.seq;
}

}  // namespace

absl::Status AddBlock(Model& m, const std::string& at, const v1::BlockCallSpec& call,
                      BuildContext& ctx) {
  const std::string f = at + ".block";
  const std::string& block = call.module();
  const auto& blocks = ctx.spec->blocks();
  auto it = blocks.find(block);
  if (it == blocks.end()) {
    std::vector<std::string> known;
    for (const auto& [name, def] : blocks) known.push_back(name);
    std::sort(known.begin(), known.end());
    return Invalid(f + ".module",
                   absl::StrCat("unknown block \"", block, "\" (model.blocks defines ",
                                known.empty() ? "none" : absl::StrJoin(known, ", "), ")"));
  }
  if (std::find(ctx.calls.begin(), ctx.calls.end(), block) != ctx.calls.end()) {
    return Invalid(f + ".module", absl::StrCat("block \"", block, "\" uses itself (",
                                               absl::StrJoin(ctx.calls, " -> "), " -> ", block,
                                               "); blocks cannot recurse"));
  }
  if (ctx.calls.size() >= static_cast<size_t>(kMaxBlockDepth)) {
    return Invalid(f, absl::StrCat("blocks nest deeper than ", kMaxBlockDepth, " levels"));
  }
  ASSIGN_OR_RETURN(const Struct args, CallArgs(f, block, it->second, call));
  RETURN_IF_ERROR(CheckName(m, f, block, call.name()));
  const std::string instance = call.name().empty() ? m.NextAutoName(block) : call.name();
  m.BeginModule(block, call.name());
  ctx.calls.push_back(block);
  const absl::Status st = AddBlockLayers(m, block, it->second, args, ctx);
  ctx.calls.pop_back();
  m.EndModule();
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat(st.message(), " (in ", instance, " from ", at, ")"));
}

absl::Status AddResidual(Model& m, const std::string& at, const v1::ResidualSpec& spec,
                         BuildContext& ctx) {
  const std::string f = at + ".residual";
  if (spec.layers().empty()) {
    return Invalid(f + ".layers", "empty: a residual connection adds x to layers(x)");
  }
  const int from = m.head();
  const Dims x = m.Last();
  for (int i = 0; i < spec.layers_size(); ++i) {
    RETURN_IF_ERROR(AddLayer(m, absl::StrCat(f, ".layers[", i, "]"), spec.layers(i), ctx));
  }
  const int main = m.head();
  const Dims y = m.Last();
  int other = from;
  if (!SameShape(x, y)) {
    if (spec.projection().empty()) {
      return Invalid(f, absl::StrCat("layers(x) is ", DimsString(y), " but x is ", DimsString(x),
                                     ": the addition needs equal shapes; add a projection (as "
                                     "Flax's ResNet: a 1x1 conv with the layers' strides and "
                                     "features, then batch_norm) or keep the shape"));
    }
    m.SetHead(from);
    for (int i = 0; i < spec.projection_size(); ++i) {
      RETURN_IF_ERROR(
          AddLayer(m, absl::StrCat(f, ".projection[", i, "]"), spec.projection(i), ctx));
    }
    if (!SameShape(m.Last(), y)) {
      return Invalid(f + ".projection",
                     absl::StrCat("gives ", DimsString(m.Last()), " for x ", DimsString(x),
                                  "; the addition needs layers(x)'s shape ", DimsString(y)));
    }
    other = m.head();
    m.SetHead(main);
  }
  m.Add(other);
  return absl::OkStatus();
}

}  // namespace lockstep::model_spec
