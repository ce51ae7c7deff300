// Helpers for the tests that read the golden files tools/reference/make_golden.py wrote
// (tests/golden/): the model a file records, its params as one flat vector, its data; and
// the gradient and training checks every backend passes (golden_test, golden_layers_test
// and golden_sequence_test: CPU; CUDA tests), for the presets, the layers models and the
// sequence models (golden_sequence.cc).
// The testing library lockstep_golden (tests/CMakeLists.txt); uses GoogleTest's assertions.
#ifndef LOCKSTEP_TESTS_GOLDEN_H_
#define LOCKSTEP_TESTS_GOLDEN_H_

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/data/dataset.h"
#include "core/io/safetensors.h"
#include "core/model.h"
#include "core/plan.h"
#include "core/spec/spec.h"
#include "core/step.h"
#include "core/testing.h"

namespace lockstep::testing {

// The ModelSpec in a golden file's "model" metadata (JSON).
v1::ModelSpec GoldenModelSpec(const std::string& json);

// The file's F32 tensors called prefix + name for each of m's params, in layout order;
// a tensor that is missing or of another shape fails the test (and is left zero).
std::vector<float> GoldenParams(const SafeTensors& st, const Model& m, const std::string& prefix);

// The same for any layout (a model's stats_layout(): "init_stats.").
std::vector<float> GoldenLayoutTensors(const SafeTensors& st, const ParamLayout& layout,
                                       const std::string& prefix);

// The examples in the file's `prefix`.images (N, H, W[, C]) and `prefix`.labels.
Dataset GoldenDataset(const SafeTensors& st, const std::string& prefix);

// The loss and every gradient of `model_name` ("cnn" or "mlp") on the golden batch,
// computed on `backend`, within 1e-5 of JAX's.
void ExpectGradientsMatchJax(Backend* backend, const std::string& model_name);

// The training steps a golden file records (`file` in tests/golden/: its spec, losses,
// dropout masks and final params; its data, or that of the file its "data" metadata
// names) run on `backend`: each loss within 1e-5 of optax's, the same dropout masks, and
// the final params within 1e-5 (relative L2 per tensor).
void ExpectTrainingMatchesGolden(Backend* backend, const std::string& file);

// 20 training steps of the golden MLP with dropout (`optimizer`: "adam" or "sgd").
void ExpectTrainingMatchesOptax(Backend* backend, const std::string& optimizer);

// A golden file written with its spec in the metadata (tools/reference/golden_layers.py,
// golden_batchnorm.py): the tensors, the spec, validated, and what the spec trains.
struct SpecGolden {
  SafeTensors st;
  v1::JobSpec spec;
  TrainSetup setup;
};

absl::StatusOr<SpecGolden> ReadSpecGolden(const std::string& file);

// layers_<name>.safetensors.
absl::StatusOr<SpecGolden> ReadLayersGolden(const std::string& name);

// The spec's initial params (Lockstep's RNG plan) within 1e-6 of the file's "init." ones.
void ExpectInitWithin1e6(const SpecGolden& g);

// Every param tensor of `got` within `tolerance` of `want`'s (relative L2).
void ExpectEveryTensorWithin(const Model& m, const std::vector<float>& got,
                             const std::vector<float>& want, double tolerance);

// The same for any layout (a model's stats_layout()).
void ExpectEveryTensorWithin(const ParamLayout& layout, const std::vector<float>& got,
                             const std::vector<float>& want, double tolerance);

// Every param tensor of `got` within 1e-5 of `want`'s (relative L2), but an attention
// layer's key/bias: its true gradient is 0 (q . b_k adds one constant to every score of a
// softmax row), so JAX's and ours are rounding noise, and it is held against its layer's
// key/kernel instead: |got - want| <= 1e-5 |want's key/kernel|.
void ExpectSequenceTensorsWithin1e5(const Model& m, const std::vector<float>& got,
                                    const std::vector<float>& want);

// The loss and the gradients of a golden file's model.
struct GoldenGradients {
  float loss = 0;
  std::vector<float> grads;
};

// At the file's init ("init.", and "init_stats." where the model has batch_stats), on the
// first global batch of `data`, dropout keyed by `key`, one replica on `backend`.
absl::StatusOr<GoldenGradients> GradientsAtInit(Backend* backend, const SpecGolden& g,
                                                const Dataset& data, rng::Key key);

// The file's grads.dropout_key (the zero key where it has none).
rng::Key GoldenDropoutKey(const SafeTensors& st);

// A file's float64 reference at its grads point, where it has one (golden_precision.py,
// golden_random.py): the loss (ref_loss, hi + lo) returned, the gradients (ref_hi. +
// ref_lo.) in `ref`, in m's layout.
std::optional<double> Float64Reference(const SafeTensors& st, const Model& m,
                                       std::vector<double>* ref);

// The largest relative error of XLA's float32 gradient against the float64 reference
// (xla_error. over the tensor's norm), over the tensors whose true gradient is not 0;
// 0 where the file has no reference.
double XlaWorstRelativeError(const SafeTensors& st, const Model& m);

// Every gradient no further from the float64 reference than `slack` times XLA's float32
// gradient is (absolute L2 per tensor; or than 1e-6 of the tensor's norm), and the loss
// within 1e-5 of float64's.
void ExpectAsCloseToFloat64AsXla(const Model& m, const GoldenGradients& got, const SafeTensors& st,
                                 double slack);

// The loss and every gradient at the file's init with its init batch_stats (a file
// written as tools/reference/golden_batchnorm.py and golden_resnet.py write theirs:
// "grads." on the first global batch, train mode, the zero dropout key), one replica on
// `backend`: within 1e-5 of JAX's (relative L2 per tensor).
void ExpectStatsModelGradientsMatchJax(Backend* backend, const std::string& file);

// The loss and every gradient of the layers model `name` at its golden init, on the
// golden batch with the golden dropout key, computed on `backend`: within 1e-5 of JAX's
// (ExpectSequenceTensorsWithin1e5: a vision transformer's attention has a key bias).
void ExpectLayersGradientsMatchJax(Backend* backend, const std::string& name);

// 20 steps of the layers model `name` with its spec's optimizer and dropout from its own
// init on `backend`: each loss within 1e-5 of optax's, the same dropout masks, and the
// final params within 1e-5 (ExpectSequenceTensorsWithin1e5).
void ExpectLayersTrainingMatchesOptax(Backend* backend, const std::string& name);

// A sequence golden file (sequence_<name>.safetensors: "embed", "attention", "decoder")
// and its token stream windowed as Lockstep windows token datasets.
struct SequenceGoldenFile {
  SpecGolden g;
  Dataset data;
};

absl::StatusOr<SequenceGoldenFile> ReadSequenceGolden(const std::string& name);

// The token-level loss and every gradient of the sequence model `name` at its golden init,
// on the first windows with the golden dropout key, computed on `backend`: within 1e-5
// of JAX's (ExpectSequenceTensorsWithin1e5).
void ExpectSequenceGradientsMatchJax(Backend* backend, const std::string& name);

// 20 steps of the sequence model `name` with dropout from its own init on `backend`:
// each loss within 1e-5 of optax's, the same dropout masks, the final params within 1e-5.
void ExpectSequenceTrainingMatchesOptax(Backend* backend, const std::string& name);

}  // namespace lockstep::testing

#endif  // LOCKSTEP_TESTS_GOLDEN_H_
