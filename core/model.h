// Model: a sequential stack of Flax linen layers (Conv, Dense, relu, avg_pool, flatten,
// Dropout) with Flax's module names, parameter layout and initialization. Backends
// execute the stack (see step.h); this file only describes it.
//
// Two families: the Flax MNIST example's CNN and an MLP with configurable widths and
// dropout (tools/reference/models.py defines both on the JAX side).
#ifndef LOCKSTEP_CORE_MODEL_H_
#define LOCKSTEP_CORE_MODEL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/params.h"
#include "core/rng/threefry.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

enum class LayerKind { kConv, kDense, kRelu, kAvgPool, kFlatten, kDropout };

// Per-sample activation shape, NHWC without N. Dense activations are {1, 1, F}.
struct Dims {
  int h = 1, w = 1, c = 1;
  int64_t size() const { return int64_t{h} * w * c; }
};

struct Layer {
  LayerKind kind;
  std::string name;  // Flax module name ("Conv_0", "Dropout_1"); empty for functions
  Dims in, out;
  int kernel_size = 0;  // conv: square kernel, SAME padding, stride 1
  float keep = 1.0f;    // dropout: float32(1 - rate)
  int kernel = -1;      // index into layout() for conv and dense
  int bias = -1;
};

class Model {
 public:
  // INVALID_ARGUMENT naming the field (model.kind, model.hidden, model.dropout_rate).
  static absl::StatusOr<Model> FromSpec(const v1::ModelSpec& spec);
  static Model Cnn();
  static Model Mlp(const std::vector<int>& hidden, double dropout_rate);

  const std::vector<Layer>& layers() const { return layers_; }
  const ParamLayout& layout() const { return layout_; }
  Dims input() const { return input_; }
  int num_classes() const { return layers_.back().out.c; }
  // Multiply-adds x2 of one sample's forward pass (for benchmarks' floors).
  double ForwardFlopsPerSample() const;

  // model.init(init_key, ones[1, 28, 28, 1])['params'] flattened into layout() order:
  // lecun_normal kernels (truncated normal), zero biases, Flax's per-module keys.
  std::vector<float> Init(rng::Key init_key, rng::Impl impl) const;

 private:
  explicit Model(Dims input) : input_(input) {}
  Dims Last() const { return layers_.empty() ? input_ : layers_.back().out; }
  std::string AutoName(const std::string& cls);
  void Conv(int features, int kernel_size);
  void Dense(int features);
  void Relu();
  void AvgPool();
  void Flatten();
  void Dropout(double rate);

  Dims input_;
  std::vector<Layer> layers_;
  ParamLayout layout_;
  std::vector<std::pair<std::string, int>> counters_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_MODEL_H_
