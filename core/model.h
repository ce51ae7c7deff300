// Model: a sequential stack of Flax linen layers (Conv, Dense, BatchNorm, LayerNorm,
// activations, pools, flatten, Dropout) with Flax's module names, parameter layout and
// initialization, and the layout of the `batch_stats` collection (BatchNorm's running
// averages).
// Backends execute the stack (see step.h); this file only describes it.
//
// A spec's `model.layers` builds any such stack (ModelFromSpec, core/model_spec.h, checks
// it); the presets
// `cnn` (the Flax MNIST example's CNN) and `mlp` expand to layer lists
// (tools/reference/models.py and golden_layers.py define the same on the JAX side).
#ifndef LOCKSTEP_CORE_MODEL_H_
#define LOCKSTEP_CORE_MODEL_H_

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/params.h"
#include "core/rng/threefry.h"

namespace lockstep {

enum class LayerKind {
  kConv,
  kDense,
  kRelu,
  kAvgPool,
  kFlatten,  // a reshape, no data moved: flatten, or to_sequence (image [h, w, c] -> [h * w, c])
  kDropout,
  kMaxPool,
  kLayerNorm,
  kActivation,  // gelu, tanh, sigmoid, silu (Layer::activation)
  kBatchNorm,
  kAdd,            // a residual connection's sum: out(src) + out(residual)
  kEmbed,          // nn.Embed on token ids: flat [T] -> sequence [T, features]
  kPositionEmbed,  // x + nn.Embed(max_len, F)(arange(T)): a learned position embedding
  kAttention,      // nn.MultiHeadDotProductAttention, self-attention on a sequence
  kClassToken,     // ViT's class token: a learned row put before the tokens, [T, F] -> [T + 1, F]
  kSequencePool,   // [T, F] -> [F]: x[:, 0] or the mean over the positions
};

// A computation (and activation) dtype: Flax's `dtype` (docs/models.md#mixed-precision).
// Params are float32 whatever it is (param_dtype).
enum class DType { kFloat32, kBfloat16 };

// "float32", "bfloat16".
const char* DTypeName(DType d);

// jnp.promote_types of two activation dtypes: bfloat16 only when both are.
inline DType Promote(DType a, DType b) {
  return a == DType::kBfloat16 && b == DType::kBfloat16 ? DType::kBfloat16 : DType::kFloat32;
}

// lax's padding modes for convolutions and pools.
enum class Padding { kSame, kValid };

// Per-sample activation shape, NHWC without N. Flat activations (after flatten or dense)
// are {1, 1, F, flat = true}: Flax's rank-2 (batch, F) arrays. Sequences (after embed)
// are {1, T, F, seq = true}: Flax's rank-3 (batch, T, F) arrays, whose last axis dense,
// layer_norm and attention act on, position by position.
struct Dims {
  int h = 1, w = 1, c = 1;
  bool flat = false;
  bool seq = false;
  int64_t size() const { return int64_t{h} * w * c; }
  // Rows of the last axis per sample: T for a sequence, 1 when flat, h * w for an image.
  int rows() const { return h * w; }
};

// "[28, 28, 1]", "[784]" when flat, "[T, F]" for a sequence.
std::string DimsString(const Dims& d);

// Where a conv kernel or pool window (kh x kw) sits over its input: strides and lax's
// padding (SAME: out = ceil(in / stride), the total padding split with the extra row or
// column at the bottom or right).
struct Window {
  int kh = 1, kw = 1;
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
};

struct Layer {
  LayerKind kind;
  // Flax module path, nested scopes joined by '/' ("Conv_0", "ResNetBlock_1/Conv_0");
  // empty for functions.
  std::string name;
  Dims in, out;
  // The layer whose output this one reads (-1: the model's input): the previous one but
  // where a residual connection branches (its projection reads the residual's input).
  int src = -1;
  int residual = -1;              // kAdd: the other operand's layer (-1: the model's input)
  Window window;                  // conv kernel, pool window
  bool count_include_pad = true;  // avg_pool
  bool pool_mean = false;         // sequence_pool: the mean (true) or the first position
  Activation activation = Activation::kGeluTanh;  // kActivation
  float keep = 1.0f;                              // dropout: float32(1 - rate)
  float epsilon = 0.0f;                           // layer_norm, batch_norm: float32(epsilon)
  // batch_norm: float32(momentum) and float32(1 - momentum) (1 - momentum taken in double,
  // as Python does before JAX casts it).
  float momentum = 0.0f, one_minus_momentum = 0.0f;
  // A position embedding's initializer: normal * init_stddev (ViT's AddPositionEmbs), or
  // where 0 nn.Embed's variance_scaling(1, fan_in, normal, out_axis=0).
  float init_stddev = 0.0f;
  int kernel = -1;  // indices into layout(): conv and dense kernels, embeddings, class tokens,
  int bias = -1;    // their biases and the norms' (-1 without use_bias)
  int scale = -1;   // the norms' scales (-1 without use_scale)
  int mean = -1;    // batch_norm: indices into stats_layout() of its running mean and var
  int var = -1;
  // attention: heads, their depth and the mask; the params of its query, key, value and
  // out submodules, in that order (kernel = kernels[0], bias = biases[0]).
  int heads = 0, head_dim = 0;
  bool causal = false;
  std::array<int, 4> kernels = {-1, -1, -1, -1}, biases = {-1, -1, -1, -1};
  // The dtype the layer computes in and stores its output in: a module's `dtype`; a
  // function's (relu, pools, dropout, ...) its input's; an add's or position embedding's
  // the promotion of its operands'. bfloat16: Flax's rounding points (docs/models.md).
  DType dtype = DType::kFloat32;

  bool has_params() const { return kernel >= 0 || bias >= 0 || scale >= 0; }
  bool bf16() const { return dtype == DType::kBfloat16; }
  // The bytes Flax hashes for make_rng in this module's scope: the path's names
  // concatenated ("ResNetBlock_1Conv_0").
  std::string RngPath() const;
};

class Model {
 public:
  static Model Cnn(Dims input = {28, 28, 1});
  static Model Mlp(const std::vector<int>& hidden, double dropout_rate, Dims input = {28, 28, 1});

  // An empty stack on per-sample inputs of shape `input`. The builders below append one
  // layer each; their arguments must fit the stack so far (ModelFromSpec checks a spec's:
  // features >= 1, windows no larger than a VALID input, dense on flat inputs...).
  explicit Model(Dims input) : input_(input) {}
  // Modules take `name` as Flax's `name=` (unique in its scope: ModelFromSpec checks, see
  // HasName); empty: the next auto name of their class in the scope ("Conv_2").
  // nn.Conv(features, kernel_size, strides, padding, use_bias) on an image input.
  void Conv(int features, std::array<int, 2> kernel_size, std::array<int, 2> strides = {1, 1},
            Padding padding = Padding::kSame, bool use_bias = true, const std::string& name = "");
  // nn.Dense(features, use_bias) on a flat input.
  void Dense(int features, bool use_bias = true, const std::string& name = "");
  // nn.LayerNorm(epsilon, use_bias, use_scale) over the last axis.
  void LayerNorm(double epsilon = 1e-6, bool use_bias = true, bool use_scale = true,
                 const std::string& name = "");
  // nn.BatchNorm(use_running_average=not train, momentum, epsilon, use_bias, use_scale,
  // axis_name='batch'): statistics per channel (the last axis) over every other axis and
  // across replicas; momentum in [0, 1), epsilon > 0.
  void BatchNorm(double momentum = 0.99, double epsilon = 1e-5, bool use_bias = true,
                 bool use_scale = true, const std::string& name = "");
  void Relu();
  void Activate(Activation a);  // nn.gelu, nn.tanh, nn.sigmoid, nn.silu
  // nn.avg_pool / nn.max_pool(window_shape, strides, padding) on an image input.
  void AvgPool(std::array<int, 2> window_shape, std::array<int, 2> strides = {1, 1},
               Padding padding = Padding::kValid, bool count_include_pad = true);
  void MaxPool(std::array<int, 2> window_shape, std::array<int, 2> strides = {1, 1},
               Padding padding = Padding::kValid);
  void Flatten();
  void Dropout(double rate, const std::string& name = "");  // nn.Dropout(rate), rate in [0, 1)
  // nn.Embed(num_embeddings, features) on a flat input of T token ids: a sequence [T,
  // features]. Param Embed_N/embedding (num_embeddings, features).
  void Embed(int num_embeddings, int features, const std::string& name = "");
  // x + nn.Embed(max_len, F)(jnp.arange(T)) on a sequence [T, F], max_len >= T: Embed_N.
  void PositionEmbed(int max_len, const std::string& name = "");
  // Vision transformers. An image [h, w, c] as a sequence [h * w, c] (a reshape).
  void ToSequence();
  // The class token: param `<scope>/<name>` (1, 1, F), zeros, put before the tokens of a
  // sequence [T, F]: [T + 1, F].
  void ClassToken(const std::string& name = "cls");
  // ViT's AddPositionEmbs: x + param `AddPositionEmbs_N/pos_embedding` (1, T, F),
  // initialized normal * stddev, on a sequence [T, F].
  void AddPositionEmbs(double stddev = 0.02, const std::string& name = "");
  // A sequence [T, F] to [F]: its mean over the positions, or (mean false) x[:, 0].
  void SequencePool(bool mean);
  // nn.MultiHeadDotProductAttention(num_heads, qkv_features, out_features, dropout_rate,
  // use_bias)(x, mask=causal ? nn.make_causal_mask(...) : None) on a sequence [T, F]:
  // [T, out_features]. qkv_features % num_heads == 0; 0 features mean F.
  void Attention(int num_heads, int qkv_features = 0, int out_features = 0, double dropout_rate = 0,
                 bool causal = false, bool use_bias = true, const std::string& name = "");

  // Nested modules: the layers added between BeginModule and its EndModule belong to a
  // module of class `cls` (`name`, or <cls>_<N> in the enclosing scope), so that their
  // params are named "ResNetBlock_0/Conv_0/kernel". Pairs nest.
  void BeginModule(const std::string& cls, const std::string& name = "");
  void EndModule();
  // The dtype of the modules added from now on (Flax's `dtype=` on each; float32 at
  // first). Functions take their input's dtype whatever it is.
  void set_dtype(DType d) { dtype_ = d; }
  DType dtype() const { return dtype_; }
  // Whether any layer computes in bfloat16.
  bool HasBf16() const;
  // Whether `name` names a module of the current scope already; the name a module of
  // class `cls` would take there without one.
  bool HasName(const std::string& name) const;
  std::string NextAutoName(const std::string& cls) const;

  // Branches (residual connections). The head is the layer whose output the next layer
  // reads (-1: the input); each layer added becomes the head. SetHead(i) branches from
  // layer i's output (i < layers().size()); Add(other) appends out(head) + out(other),
  // whose shapes must be equal.
  int head() const { return head_; }
  void SetHead(int layer) { head_ = layer; }
  void Add(int other);
  // Layer i's output shape (-1: the input).
  Dims OutputOf(int layer) const { return layer < 0 ? input_ : layers_[layer].out; }
  // Layer i's output dtype (-1: the input, float32).
  DType DtypeOf(int layer) const { return layer < 0 ? DType::kFloat32 : layers_[layer].dtype; }

  const std::vector<Layer>& layers() const { return layers_; }
  const ParamLayout& layout() const { return layout_; }
  // The `batch_stats` collection: "BatchNorm_0/mean", "BatchNorm_0/var", ... (empty
  // without batch_norm layers).
  const ParamLayout& stats_layout() const { return stats_layout_; }
  Dims input() const { return input_; }
  // The head's output (the input when empty).
  Dims Last() const { return OutputOf(head_); }
  int num_classes() const { return layers_.back().out.c; }
  // Predictions per example: the positions of a sequence output (one target each, the
  // token-level loss), else 1.
  int positions() const { return Last().seq ? Last().w : 1; }
  // The vocabulary a first embed layer takes (its num_embeddings), or 0 without one.
  int vocabulary() const;
  // Arithmetic of one sample's forward pass: multiply-adds x2 for conv and dense, about
  // one op per element and window read for the others (for benchmarks' floors).
  double ForwardFlopsPerSample() const;

  // model.init(init_key, ones[1, *input])['params'] flattened into layout() order:
  // lecun_normal kernels (truncated normal; DenseGeneral's fan_in over its input axes),
  // zero biases, LayerNorm scales of one, embeddings variance_scaling(1, fan_in, normal,
  // out_axis=0), Flax's per-module keys.
  std::vector<float> Init(rng::Key init_key, rng::Impl impl) const;
  // model.init(...)['batch_stats'] in stats_layout() order: zero means, unit variances.
  std::vector<float> InitStats() const;

 private:
  // `name` in the current scope, or the next auto name of `cls` there; recorded.
  std::string ModuleName(const std::string& cls, const std::string& name);
  // Adds `l` reading the head's output; it becomes the head.
  void Append(Layer l);
  // Places a kh x kw window at `strides` over Last() with `padding`: out h and w.
  Layer Windowed(LayerKind kind, std::array<int, 2> size, std::array<int, 2> strides,
                 Padding padding) const;

  Dims input_;
  std::vector<Layer> layers_;
  ParamLayout layout_;
  ParamLayout stats_layout_;
  // A Flax module scope: its path prefix ("ResNetBlock_0/"), auto-name counters per class
  // and the names taken.
  struct Scope {
    std::string prefix;
    std::vector<std::pair<std::string, int>> counters;
    std::vector<std::string> names;
  };
  std::vector<Scope> scopes_ = {Scope{}};
  int head_ = -1;
  DType dtype_ = DType::kFloat32;  // set_dtype
};

// lax.padtype_to_pads for one spatial dimension: the output size and the padding before
// and after for a window of `k` at `stride` over `in` elements (VALID: in >= k).
struct Pads {
  int out, before, after;
};
Pads PadsFor(int in, int k, int stride, Padding padding);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_MODEL_H_
