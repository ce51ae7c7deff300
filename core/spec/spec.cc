// JobSpec files and validation: YAML or JSON parsed into the JobSpec message, every error naming
// the field. Contract: spec.h.
#include "core/spec/spec.h"

#include <google/protobuf/util/json_util.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/data/dataset.h"
#include "core/model.h"
#include "core/model_spec.h"
#include "core/optimizer.h"
#include "core/optimizer_spec.h"
#include "core/rng/threefry.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

using nlohmann::json;

// YAML scalars carry no type; plain ones become JSON numbers or booleans when they read
// as such, quoted ones stay strings. Protobuf's JSON parser then checks types per field.
json ScalarToJson(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted
  if (s == "true") return true;
  if (s == "false") return false;
  if (s == "null" || s == "~" || s.empty()) return nullptr;
  int64_t i;
  auto [ip, iec] = std::from_chars(s.data(), s.data() + s.size(), i);
  if (iec == std::errc() && ip == s.data() + s.size()) return i;
  double d;
  auto [dp, dec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (dec == std::errc() && dp == s.data() + s.size()) return d;
  return s;
}

// At most this many values in a spec: more than 64 KiB of honest YAML holds, far
// fewer than aliases can expand a few hundred bytes to ("billion laughs").
constexpr int64_t kMaxSpecValues = 1 << 16;

// Nesting deeper than this is refused: a spec is 3 levels deep, and an alias inside its
// own anchor ("a: &a [*a]") makes a cycle that would recurse until the stack overflows
// (found by spec_yaml_fuzz).
constexpr int kMaxSpecDepth = 64;

// `budget`: values left before the document is refused (a YAML::Exception at `n`).
json YamlToJson(const YAML::Node& n, int64_t& budget, int depth = 0) {
  if (--budget < 0) {
    throw YAML::Exception(
        n.Mark(), absl::StrCat("more than ", kMaxSpecValues, " values (aliases expanding?)"));
  }
  if (depth > kMaxSpecDepth) {
    throw YAML::Exception(n.Mark(), absl::StrCat("nested deeper than ", kMaxSpecDepth,
                                                 " levels (an alias inside its own anchor?)"));
  }
  switch (n.Type()) {
    case YAML::NodeType::Scalar:
      return ScalarToJson(n);
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& e : n) a.push_back(YamlToJson(e, budget, depth + 1));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) o[kv.first.Scalar()] = YamlToJson(kv.second, budget, depth + 1);
      return o;
    }
    default:
      return nullptr;
  }
}

// A scalar field's value as a user reads it in an error: "five", true, a list.
std::string Shown(const json& value) {
  if (value.is_string()) return absl::StrCat("\"", value.get<std::string>(), "\"");
  if (value.is_array()) return "a list";
  if (value.is_object()) return "a mapping";
  return value.dump();
}

// A number, a bool or a list where the field wants one, so that `epochs: five` says so
// instead of protobuf's "Invalid value for TYPE_UINT32". Strings of digits pass (protobuf
// JSON takes "5" for a number); enums and strings are protobuf's to check. A list's field
// also takes one element alone (`hidden: 512` is [512]), as protobuf's JSON parser does.
absl::Status CheckScalar(const json& value, const google::protobuf::FieldDescriptor* f,
                         const std::string& where, bool element = false) {
  using FD = google::protobuf::FieldDescriptor;
  if (value.is_null()) return absl::OkStatus();
  if (f->is_repeated() && !element) {
    if (!value.is_array()) return CheckScalar(value, f, where, true);
    for (size_t i = 0; i < value.size(); ++i) {
      RETURN_IF_ERROR(CheckScalar(value[i], f, absl::StrCat(where, "[", i, "]"), true));
    }
    return absl::OkStatus();
  }
  const FD::CppType type = f->cpp_type();
  if (type == FD::CPPTYPE_BOOL) {
    if (value.is_boolean()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected true or false, not ", Shown(value)));
  }
  const bool whole = type == FD::CPPTYPE_INT32 || type == FD::CPPTYPE_INT64 ||
                     type == FD::CPPTYPE_UINT32 || type == FD::CPPTYPE_UINT64;
  const bool non_negative = type == FD::CPPTYPE_UINT32 || type == FD::CPPTYPE_UINT64;
  if (!whole && type != FD::CPPTYPE_FLOAT && type != FD::CPPTYPE_DOUBLE) return absl::OkStatus();
  double number = 0;
  const bool is_number = value.is_number() ||
                         (value.is_string() && absl::SimpleAtod(value.get<std::string>(), &number));
  if (value.is_number()) number = value.get<double>();
  if (is_number && (!whole || number == std::floor(number)) && (!non_negative || number >= 0)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": expected ", whole ? "a whole number" : "a number",
                   non_negative ? " >= 0" : "", ", not ", Shown(value)));
}

// Protobuf's JSON errors say what is wrong but not always where; walk the document
// against the descriptor first so that unknown fields are reported by their path, and
// scalars of the wrong kind by their path and what the field wants.
absl::Status CheckFields(const json& j, const google::protobuf::Descriptor* d,
                         const std::string& path) {
  if (!j.is_object()) return absl::OkStatus();  // type errors: protobuf reports them
  for (const auto& [key, value] : j.items()) {
    const google::protobuf::FieldDescriptor* f = d->FindFieldByName(key);
    if (f == nullptr) f = d->FindFieldByCamelcaseName(key);
    const std::string where = path.empty() ? key : absl::StrCat(path, ".", key);
    if (f == nullptr) {
      std::string known;
      for (int i = 0; i < d->field_count(); ++i) {
        absl::StrAppend(&known, i ? ", " : "", d->field(i)->name());
      }
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown field (known here: ", known, ")"));
    }
    if (f->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE) {
      RETURN_IF_ERROR(CheckScalar(value, f, where));
      continue;
    }
    if (f->message_type()->file()->package() == "google.protobuf") {
      continue;  // Struct and ListValue (a block's untyped args and layers)
    }
    if (f->is_map()) {  // model.blocks: name -> BlockSpec
      const google::protobuf::FieldDescriptor* v = f->message_type()->map_value();
      if (!value.is_object() || v->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE) {
        continue;
      }
      for (const auto& [k, entry] : value.items()) {
        RETURN_IF_ERROR(CheckFields(entry, v->message_type(), absl::StrCat(where, ".", k)));
      }
    } else if (!f->is_repeated()) {
      RETURN_IF_ERROR(CheckFields(value, f->message_type(), where));
    } else if (value.is_array()) {
      for (size_t i = 0; i < value.size(); ++i) {
        RETURN_IF_ERROR(CheckFields(value[i], f->message_type(), absl::StrCat(where, "[", i, "]")));
      }
    }
  }
  return absl::OkStatus();
}

// Layer entries name one layer each: `- conv: {...}`. A layer without options may also
// be written bare (`- relu`) or with no value (`- relu:`); both become `relu: {}`. The
// lists of a residual connection likewise (a block's layers: when a call reads them).
absl::Status NormalizeLayerList(json& layers, const std::string& at) {
  if (!layers.is_array()) return absl::OkStatus();
  for (size_t i = 0; i < layers.size(); ++i) {
    json& entry = layers[i];
    const std::string where = absl::StrCat(at, "[", i, "]");
    if (entry.is_string()) entry = json{{entry.get<std::string>(), json::object()}};
    if (!entry.is_object()) continue;  // a type error: protobuf reports it
    if (entry.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": empty; name one layer (conv, dense, relu, flatten...)"));
    }
    if (entry.size() != 1) {
      std::string keys;
      for (const auto& [key, value] : entry.items())
        absl::StrAppend(&keys, keys.empty() ? "" : ", ", key);
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": one layer per entry, found ", entry.size(), " (", keys, ")"));
    }
    json& options = entry.begin().value();
    if (options.is_null()) options = json::object();
    if (entry.begin().key() == "residual" && options.is_object()) {
      for (const char* list : {"layers", "projection"}) {
        if (options.contains(list)) {
          RETURN_IF_ERROR(
              NormalizeLayerList(options[list], absl::StrCat(where, ".residual.", list)));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status NormalizeLayers(json& doc) {
  if (!doc.contains("model") || !doc["model"].is_object()) return absl::OkStatus();
  json& model = doc["model"];
  if (!model.contains("layers")) return absl::OkStatus();
  return NormalizeLayerList(model["layers"], "model.layers");
}

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// `workers: {min: A, max: C}` (an elastic job's range) is `min_workers: A, workers: C` in
// the JobSpec message; a plain number stays as it is.
absl::Status NormalizeWorkers(json& doc) {
  if (!doc.contains("workers") || !doc["workers"].is_object()) return absl::OkStatus();
  if (doc.contains("min_workers") || doc.contains("minWorkers")) {
    return Invalid("workers", "give the range as {min, max} or min_workers, not both");
  }
  const json range = doc["workers"];
  for (const auto& [key, value] : range.items()) {
    if (key != "min" && key != "max") {
      return Invalid(absl::StrCat("workers.", key), "unknown field (known here: min, max)");
    }
    if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
      return Invalid(absl::StrCat("workers.", key), "must be a positive whole number");
    }
  }
  if (!range.contains("max")) return Invalid("workers.max", "missing (the most workers)");
  doc["workers"] = range["max"];
  if (range.contains("min")) doc["min_workers"] = range["min"];
  return absl::OkStatus();
}

// A file name the coordinator resolves in its checkpoint folder: relative, and never
// leaving it.
absl::Status CheckRelativePath(const std::string& field, const std::string& path) {
  if (path.size() > 1024) return Invalid(field, "longer than 1024 characters");
  if (path.empty()) return absl::OkStatus();
  if (path.front() == '/') return Invalid(field, "must be relative (to its folder)");
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") return Invalid(field, "must stay inside its folder (no \"..\")");
  }
  return absl::OkStatus();
}

// How deep arrays and objects nest in `text`, which is JSON.
int JsonDepth(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseSpec(const std::string& text, const std::string& source) {
  json doc;
  if (json::accept(text)) {
    // JSON is read as JSON: YAML's flow style takes most of it but not all (a key on one
    // line and its colon on the next, found by spec_json_fuzz).
    if (JsonDepth(text) > kMaxSpecDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": nested deeper than ", kMaxSpecDepth, " levels"));
    }
    doc = json::parse(text);
  } else {
    try {
      int64_t budget = kMaxSpecValues;
      doc = YamlToJson(YAML::Load(text), budget);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": not valid YAML or JSON: line ", e.mark.line + 1, ": ", e.msg));
    }
  }
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": expected a mapping of fields"));
  }
  absl::Status st = NormalizeLayers(doc);
  if (st.ok()) st = NormalizeWorkers(doc);
  if (st.ok()) st = CheckFields(doc, v1::JobSpec::descriptor(), "");
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", st.message()));
  std::string doc_json;
  try {
    doc_json = doc.dump();
  } catch (const json::exception&) {  // a string that is not UTF-8
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid UTF-8 text"));
  }
  v1::JobSpec spec;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto pst = google::protobuf::util::JsonStringToMessage(doc_json, &spec, opts);
  if (!pst.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", std::string(pst.message().data(), pst.message().size())));
  }
  return spec;
}

absl::StatusOr<v1::JobSpec> LoadSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read spec file"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseSpec(ss.str(), path);
}

namespace {

// audit.every_steps where the spec leaves `audit` unset: at most about 1% of the
// samples/s (bench/results/audit.md).
constexpr uint64_t kDefaultAuditEverySteps = 100;

// On by default (`audit` unset: every kDefaultAuditEverySteps steps), off with
// `audit: {every_steps: 0}`. Every job can be audited (docs/audit.md): the shard audit
// recomputes one worker's shard (or logical replica) on another and compares bits; the
// replay audit replays a one-worker job on a free worker. A BatchNorm model on 2 or more
// workers is audited on logical replicas (AuditedOnReplicas).
absl::Status CheckAudit(v1::JobSpec& spec) {
  if (!spec.has_audit()) spec.mutable_audit()->set_every_steps(kDefaultAuditEverySteps);
  if (spec.audit().every_steps() > 1'000'000'000) {
    return Invalid("audit.every_steps", "must be at most 1,000,000,000");
  }
  return absl::OkStatus();
}

// A BatchNorm model on 2 or more workers without `replicas` and with the audit on (as by
// default), at a fixed number of workers: `replicas: <workers>`, so that a shard (a
// logical replica) has bits of its own for the shard audit; its statistics all-reduced
// in floats otherwise depend on every worker's. `audit: {every_steps: 0}` keeps the path
// without replicas.
void AuditedOnReplicas(v1::JobSpec& spec, const Model& model) {
  if (model.stats_layout().total() > 0 && spec.workers() >= 2 && spec.replicas() == 0 &&
      (!spec.has_audit() || spec.audit().every_steps() > 0) &&
      (spec.min_workers() == 0 || spec.min_workers() == spec.workers())) {
    spec.set_replicas(spec.workers());
  }
}

// `replicas` and the workers' range (docs/elastic.md): A <= C <= V; without replicas the
// range is one number. The caller checks that V (or N) divides the global batch.
absl::Status CheckReplicas(const v1::JobSpec& spec) {
  const uint32_t n = spec.workers(), min = spec.min_workers(), v = spec.replicas();
  if (v == 0) {
    if (min != 0 && min != n) {
      return Invalid("workers.min", absl::StrCat(min, " differs from workers.max (", n,
                                                 "): a range of workers needs `replicas`"));
    }
    return absl::OkStatus();
  }
  if (v > 4096) return Invalid("replicas", "must be at most 4096");
  if (n > v) {
    return Invalid("replicas", absl::StrCat(v, " is fewer than workers (", n,
                                            "): each worker computes at least one replica"));
  }
  if (min > n) {
    return Invalid("workers.min", absl::StrCat(min, " exceeds workers.max (", n, ")"));
  }
  return absl::OkStatus();
}

// The field that sets the model's outputs: the last dense layer's features, else the preset.
std::string OutputField(const v1::ModelSpec& spec) {
  for (int i = spec.layers_size() - 1; i >= 0; --i) {
    if (spec.layers(i).has_dense()) return absl::StrCat("model.layers[", i, "].dense.features");
  }
  return spec.layers_size() > 0 ? absl::StrCat("model.layers[", spec.layers_size() - 1, "]")
                                : std::string("model.kind");
}

}  // namespace

absl::Status CheckModelFitsInstalledDataset(const v1::JobSpec& job) {
  const v1::DatasetSpec& ds = job.dataset();
  const v1::ModelSpec& spec = job.model();
  if (ds.format() != "idx" || ds.name() != "fashion_mnist" || ds.path() != kDefaultDatasetPath) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const Model model, ModelFromSpec(spec));
  const Dims in = model.input();
  if (in.flat || in.h != 28 || in.w != 28 || in.c != 1) {
    return Invalid("model.input_shape",
                   absl::StrCat(DimsString(in), " does not fit dataset \"fashion_mnist\" (",
                                kDefaultDatasetPath, "): its images are [28, 28, 1]"));
  }
  if (model.num_classes() < 10) {
    return Invalid(OutputField(spec),
                   absl::StrCat("the model's last layer has ", model.num_classes(),
                                " outputs; dataset \"fashion_mnist\" has 10 classes (labels 0 "
                                "to 9): it needs at least 10"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JobSpec> Validate(const v1::JobSpec& in, const SpecLimits& limits) {
  if (in.ByteSizeLong() > 64 * 1024) return Invalid("spec", "larger than 64 KiB");
  if (in.name().size() > 256) return Invalid("name", "longer than 256 characters");
  if (in.request_id().size() > 256) return Invalid("request_id", "longer than 256 characters");
  if (limits.files_in_checkpoint_dir) {
    RETURN_IF_ERROR(CheckRelativePath("checkpoint_path", in.checkpoint_path()));
    RETURN_IF_ERROR(CheckRelativePath("resume_from", in.resume_from()));
    RETURN_IF_ERROR(CheckRelativePath("tensorboard_dir", in.tensorboard_dir()));
  }
  v1::JobSpec spec = in;
  ASSIGN_OR_RETURN(Model model, ModelFromSpec(spec.model()));
  if (model.layout().total() > limits.max_params) {
    return Invalid("model", absl::StrCat(model.layout().total(), " parameters exceed the limit of ",
                                         limits.max_params));
  }
  RETURN_IF_ERROR(OptimizerFromSpec(spec.optimizer()).status());
  if (spec.workers() == 0) spec.set_workers(1);
  if (spec.workers() > limits.max_workers) {
    return Invalid("workers",
                   absl::StrCat(spec.workers(), " exceeds the maximum of ", limits.max_workers));
  }
  const uint32_t b = spec.global_batch_size();
  if (b == 0) return Invalid("global_batch_size", "must be positive");
  if (b > limits.max_global_batch) {
    return Invalid("global_batch_size",
                   absl::StrCat(b, " exceeds the maximum of ", limits.max_global_batch));
  }
  RETURN_IF_ERROR(CheckReplicas(spec));
  RETURN_IF_ERROR(LocalBatch(spec, LogicalWorld(spec)).status());
  AuditedOnReplicas(spec, model);  // V = N: the checks above hold for it too
  if ((spec.epochs() > 0) == (spec.steps() > 0)) {
    return Invalid("epochs, steps", "set exactly one of them to a positive number");
  }
  if (spec.steps() > 1'000'000'000) return Invalid("steps", "must be at most 1,000,000,000");
  if (spec.epochs() > 100'000) return Invalid("epochs", "must be at most 100,000");
  if (!spec.has_dropout_seed()) spec.set_dropout_seed(spec.seed());
  ASSIGN_OR_RETURN(rng::Impl impl, rng::ParseImpl(spec.rng_impl()));
  spec.set_rng_impl(rng::ImplName(impl));
  if (spec.device().empty()) spec.set_device("cpu");
  if (spec.device() != "cpu" && spec.device() != "cuda") {
    return Invalid("device", absl::StrCat("unknown device \"", spec.device(),
                                          "\" (expected \"cpu\" or \"cuda\")"));
  }
  if (spec.threads() > 1024) return Invalid("threads", "must be at most 1024");
  RETURN_IF_ERROR(CheckDatasetSpec(spec.mutable_dataset(), model.input(), limits.data_roots));
  auto* ev = spec.mutable_eval();
  if (ev->every_epochs() > 0 && ev->every_steps() > 0) {
    return Invalid("eval", "set at most one of every_epochs and every_steps");
  }
  if (spec.epochs() > 0 && ev->every_epochs() == 0 && ev->every_steps() == 0) {
    ev->set_every_epochs(1);
  }
  if (ev->batch_size() == 0) ev->set_batch_size(1000);
  if (ev->batch_size() > 100'000) return Invalid("eval.batch_size", "must be at most 100,000");
  if (!spec.allreduce().has_bucket_kib()) {
    spec.mutable_allreduce()->set_bucket_kib(kDefaultBucketKib);
  }
  if (spec.allreduce().bucket_kib() > (1u << 20)) {
    return Invalid("allreduce.bucket_kib", "must be at most 1048576 (1 GiB)");
  }
  auto* rec = spec.mutable_recovery();
  if (rec->snapshot_every_steps() == 0) rec->set_snapshot_every_steps(1000);
  if (rec->snapshot_every_seconds() == 0) rec->set_snapshot_every_seconds(60);
  if (rec->snapshots_kept() == 0) rec->set_snapshots_kept(2);
  if (!rec->has_max_restarts()) rec->set_max_restarts(3);
  if (rec->recovery_timeout_seconds() == 0) rec->set_recovery_timeout_seconds(300);
  if (rec->max_restarts() > 1000) return Invalid("recovery.max_restarts", "must be at most 1000");
  if (rec->snapshots_kept() > 100) return Invalid("recovery.snapshots_kept", "must be at most 100");
  if (rec->recovery_timeout_seconds() > 86400) {
    return Invalid("recovery.recovery_timeout_seconds", "must be at most 86400 (a day)");
  }
  if (spec.priority() < -1000 || spec.priority() > 1000) {
    return Invalid("priority", absl::StrCat(spec.priority(), " is outside -1000 to 1000"));
  }
  RETURN_IF_ERROR(CheckAudit(spec));
  return spec;
}

absl::StatusOr<TrainSetup> SetupFromSpec(const v1::JobSpec& spec) {
  ASSIGN_OR_RETURN(Model model, ModelFromSpec(spec.model()));
  ASSIGN_OR_RETURN(Optimizer optimizer, OptimizerFromSpec(spec.optimizer()));
  ASSIGN_OR_RETURN(rng::Impl impl, rng::ParseImpl(spec.rng_impl()));
  return TrainSetup{std::move(model), std::move(optimizer), impl};
}

absl::StatusOr<int> LocalBatch(const v1::JobSpec& spec, int world_size) {
  const uint32_t b = spec.global_batch_size();
  if (world_size <= 0 || b % world_size != 0) {
    return Invalid("global_batch_size", absl::StrCat(b, " is not divisible by ",
                                                     spec.replicas() > 0 ? "replicas" : "workers",
                                                     " (", world_size, ")"));
  }
  return static_cast<int>(b / world_size);
}

int64_t TotalSteps(const v1::JobSpec& spec, int64_t num_train) {
  if (spec.steps() > 0) return static_cast<int64_t>(spec.steps());
  return static_cast<int64_t>(spec.epochs()) * (num_train / spec.global_batch_size());
}

bool EvalDue(const v1::EvalSpec& eval, int64_t done, int64_t steps_per_epoch) {
  const bool epoch_end = done % steps_per_epoch == 0;
  return (eval.every_epochs() > 0 && epoch_end &&
          (done / steps_per_epoch) % eval.every_epochs() == 0) ||
         (eval.every_steps() > 0 && done % eval.every_steps() == 0);
}

}  // namespace lockstep
