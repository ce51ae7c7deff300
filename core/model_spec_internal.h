// ModelFromSpec's parts shared by core/model_spec.cc (presets, the model), model_spec_layers.cc
// (layers) and model_spec_blocks.cc (named blocks and residual connections); not a public header.
#ifndef LOCKSTEP_CORE_MODEL_SPEC_INTERNAL_H_
#define LOCKSTEP_CORE_MODEL_SPEC_INTERNAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/model.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep::model_spec {

inline constexpr int kMaxLayers = 1024;  // in the model, blocks expanded
inline constexpr uint32_t kMaxFeatures = 1u << 20;
inline constexpr uint32_t kMaxDim = 1u << 16;  // an image side, a kernel side, a stride
// Floats per sample in one activation, or in one conv patch: bounds every buffer's index
// arithmetic (int rows and columns at batch sizes the spec allows).
inline constexpr int64_t kMaxElements = int64_t{1} << 26;
// Blocks inside blocks, at most this deep.
inline constexpr int kMaxBlockDepth = 16;

// What a spec's layers are read against: its blocks, and the calls being expanded
// (outermost first: "ResNetBlock"), for recursion.
struct BuildContext {
  const v1::ModelSpec* spec;
  std::vector<std::string> calls;
};

// INVALID_ARGUMENT "field: what".
absl::Status Invalid(const std::string& field, const std::string& what);
// "[a, b, c]".
std::string List(const google::protobuf::RepeatedField<uint32_t>& v);
// A Flax name: [A-Za-z_][A-Za-z0-9_]*, at most 128 characters.
bool IsName(const std::string& s);
// INVALID_ARGUMENT naming `field` when a module of class `cls` called `name` (empty: its
// auto name) would reuse a name of the current scope, or `name` is not a name.
absl::Status CheckName(const Model& m, const std::string& field, const std::string& cls,
                       const std::string& name);

// The dtype named `s` at `field` ("float32" or "bfloat16"; empty: `fallback`).
absl::StatusOr<DType> ParseDtype(const std::string& field, const std::string& s, DType fallback);

// Appends the layer `spec`, found at `at` ("model.layers[3]"), to `m`, checking its
// fields and shapes against the model so far.
absl::Status AddLayer(Model& m, const std::string& at, const v1::LayerSpec& spec,
                      BuildContext& ctx);
// A block's layers in a module scope of their own (model_spec_blocks.cc).
absl::Status AddBlock(Model& m, const std::string& at, const v1::BlockCallSpec& call,
                      BuildContext& ctx);
// x + layers(x), x projected where the shapes differ (model_spec_blocks.cc).
absl::Status AddResidual(Model& m, const std::string& at, const v1::ResidualSpec& spec,
                         BuildContext& ctx);

}  // namespace lockstep::model_spec

#endif  // LOCKSTEP_CORE_MODEL_SPEC_INTERNAL_H_
