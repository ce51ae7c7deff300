// StepExecutor: the one training step in Lockstep, run by every replica alike (N = 1: no
// collective). It reads top to bottom:
// gather the local batch, forward, loss, backward, all-reduce (mean), optimizer update.
// With all-reduce buckets (set_allreduce_bucket_bytes, core/grad_buckets.h) the gradients'
// all-reduce overlaps backward: each bucket starts (Collective::StartAllReduceSum) as soon
// as backward has produced it, and the step waits for all of them before the division by
// N and the update. The sums, hence the results, are bitwise those of one all-reduce for
// 2 workers (each sum is a + b); for more, Gloo's ring sums each element in an order that
// depends on the buffer's size, so the bucket size is part of what a run's bits depend on
// (deterministic for a given size).
//
// With logical replicas (SetLogicalReplicas, StepReplicas; core/step_replicas.cc) an
// executor computes a range of a job's V logical replicas instead, every cross-replica
// sum exact (core/exact_sum.h), so that the bits do not depend on how many workers run
// the V replicas (docs/elastic.md).
//
// The replica (params, gradients, optimizer state, datasets) lives in the backend's
// memory. Thread safety: none; one thread drives an executor.
#ifndef LOCKSTEP_CORE_STEP_H_
#define LOCKSTEP_CORE_STEP_H_

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/collective.h"
#include "core/data/host_dataset.h"
#include "core/exact_sum.h"
#include "core/exact_sum_device.h"
#include "core/grad_buckets.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/train_state.h"

namespace lockstep {

// A dataset resident in a backend's memory.
struct DeviceDataset {
  int64_t size = 0;
  int64_t row = 0;
  int64_t label_row = 1;  // labels per example (a token dataset's context)
  Buffer images, labels;
};

// Copies a dataset into the backend's memory (the CPU backend aliases it instead, so
// `dataset` must outlive the result).
absl::StatusOr<DeviceDataset> UploadDataset(Backend& backend, const Dataset& dataset);

// The bytes a StepExecutor allocates in its backend for batches of up to `batch`
// examples (training: with the gradients' buffers and dropout masks; evaluation: the
// forward pass only), besides the state; for estimating a job's memory before it runs.
uint64_t WorkspaceBytes(const Model& model, int batch, bool train);

struct StepMetrics {
  // Over the local batch's predictions: its examples, or every position of every example
  // for a sequence model (the token-level loss and accuracy).
  float loss = 0;      // mean
  float accuracy = 0;  // fraction predicted correctly
  // The predictions (examples, or examples x positions) and how many of them were right:
  // accuracy's integers, for sums over batches that must not round.
  int64_t predictions = 0, correct = 0;
  // StepReplicas: each local logical replica's loss and accuracy (over its B/V rows), in
  // replica order; loss and accuracy above are then their float sums divided by the count.
  std::vector<float> replica_loss, replica_accuracy;
  // StepReplicas: all V logical replicas' losses and accuracies, in replica order, the
  // other ranks' learned in the step's gradient sum (exactly: their float bits).
  std::vector<float> all_replica_loss, all_replica_accuracy;
};

struct EvalMetrics {
  double loss = 0;      // mean per prediction
  double accuracy = 0;  // correct / predictions
  int64_t count = 0;    // examples
  // Predictions made (count x the model's positions: every token of a sequence model's
  // windows) and how many were right, as integers.
  int64_t predictions = 0, correct = 0;
};

class StepExecutor {
 public:
  // `collective` may be null (N = 1). Both must outlive the executor. local_batch is B/N.
  // With use_graphs, the device part of Step (gather to update) is captured as a backend
  // graph and replayed, where the backend supports it: the first step runs eagerly (a
  // warm-up: libraries set themselves up lazily, which must not happen in a capture), the
  // second is captured and launched, later ones replay it (recaptured for another dataset).
  // If a capture fails, that step and all later ones run eagerly (see graph_fallback()).
  static absl::StatusOr<std::unique_ptr<StepExecutor>> Create(
      Model model, Optimizer optimizer, rng::Impl impl, int local_batch, Backend* backend,
      Collective* collective, CollectiveOptions collective_options = {}, bool use_graphs = true);
  ~StepExecutor();

  absl::StatusOr<DeviceDataset> Upload(const Dataset& dataset) {
    return UploadDataset(*backend_, dataset);
  }

  absl::Status SetState(const TrainState& state);
  absl::StatusOr<TrainState> GetState();
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  void set_collective_timeout(absl::Duration t) { collective_options_.timeout = t; }
  // Gradient buckets of at least this many bytes (PlanGradBuckets); 0 (the default): one
  // all-reduce of all gradients after backward, no overlap.
  void set_allreduce_bucket_bytes(size_t bytes);
  size_t param_count() const { return model_.layout().total(); }
  size_t slot_count() const { return slots_.size(); }
  size_t stats_count() const { return model_.stats_layout().total(); }

  // The state as bytes in StateBytes's layout (params, each optimizer slot, batch_stats), written
  // and read in pieces so that it never needs a second whole copy in host memory.
  // INVALID_ARGUMENT when [offset, offset + size) is outside the state.
  uint64_t state_bytes() const;
  absl::Status WriteState(uint64_t offset, std::string_view bytes);
  absl::Status ReadState(uint64_t offset, std::span<char> out);
  // ParamChecksum of the params and batch_stats, copying only them to the host.
  absl::StatusOr<uint64_t> ParamChecksum();

  // The training step on the local batch `indices` into `data`, with this replica's
  // 'dropout' stream root key. Returns the local loss and accuracy.
  absl::StatusOr<StepMetrics> Step(const DeviceDataset& data, std::span<const int32_t> indices,
                                   rng::Key dropout_key);

  // Logical replicas (docs/elastic.md): this executor computes replicas [first, first +
  // count) of a job's `total`, each on local_batch rows (B/V) with its own dropout key and
  // the same shapes wherever it runs, and every cross-replica reduction (BatchNorm's
  // statistics and their gradients' sums, the gradients) is core/exact_sum.h's over all
  // `total`, so that the bits do not depend on how the replicas are spread over workers.
  // The collective's ranks must hold the `total` replicas between them. One train state,
  // one optimizer update per step. Call before the first StepReplicas; Step and
  // ComputeGradients keep today's path. The exact sums run on the host (ExactSum) on a
  // backend with host memory, else in the backend's memory (DeviceExactSum: the same
  // bits). INVALID_ARGUMENT for a range outside [0, total), count < 1, fewer replicas than
  // ranks, or (without a collective) not all of them.
  absl::Status SetLogicalReplicas(int total, int first, int count);
  // Tests only, before SetLogicalReplicas: the exact sums in backend memory
  // (DeviceExactSum) even on a backend with host memory, so that the CPU runs the path a
  // CUDA worker takes.
  void set_exact_sum_in_backend_memory_for_testing() { exact_in_backend_ = true; }
  int logical_replicas() const { return logical_.total; }
  // The training step of the local logical replicas: `indices` their rows, replica after
  // replica (count * local_batch), `keys` their 'dropout' stream roots (count). Runs
  // eagerly (no graph). The audit's taps see each local replica's gradients before their
  // exact sum; the capture is the first local replica's. A replica's gradients are
  // ComputeGradients's on its rows and key, on any worker (for a model without
  // BatchNorm, whose statistics span the replicas). FAILED_PRECONDITION before
  // SetLogicalReplicas.
  //
  // `ride_along` (the audit's, docs/audit.md): another worker's logical replica, computed
  // here beside the local ones at the same params, layer by layer: at each BatchNorm layer
  // it adds nothing to the exact sums but normalizes with the job-wide ones the local
  // replicas computed (its forward moments and backward sums), and its gradients are not
  // summed. Its bits are then those of the same replica computed where it belongs (a
  // replica's arithmetic depends only on its rows, key and threads, and on the job-wide
  // sums). Its results: ride_along_result() after the call, once the backend is
  // synchronized. A BatchNorm model's audit needs it: its statistics span the replicas,
  // so ComputeGradients cannot recompute one alone.
  struct RideAlong {
    const DeviceDataset* data = nullptr;
    std::span<const int32_t> indices;  // local_batch rows into *data
    rng::Key key;                      // its 'dropout' stream root
  };
  absl::StatusOr<StepMetrics> StepReplicas(const DeviceDataset& data,
                                           std::span<const int32_t> indices,
                                           std::span<const rng::Key> keys,
                                           const RideAlong* ride_along = nullptr);
  struct RideAlongResult {
    float loss = 0;
    std::vector<float> gradients;  // its parameter gradients, as a local replica's
    // Its BatchNorm contributions, as local_statistics() holds a local replica's.
    std::vector<float> statistics;
  };
  const RideAlongResult& ride_along_result() const { return ride_along_result_; }

  // Forward and backward only (no gradient all-reduce, no update, running averages kept):
  // leaves the local gradients for Gradients() and the dropout masks for DropoutMasks().
  // Never uses a graph. BatchNorm's statistics are still all-reduced (N > 1): they are
  // part of the forward pass, so every replica must call this alike.
  absl::StatusOr<StepMetrics> ComputeGradients(const DeviceDataset& data,
                                               std::span<const int32_t> indices,
                                               rng::Key dropout_key);
  absl::StatusOr<std::vector<float>> Gradients();
  // One 0/1 array per Dropout layer with rate > 0 and per attention layer with a
  // dropout_rate > 0 (its [T, T] mask), in layer order, from the last step.
  absl::StatusOr<std::vector<std::vector<uint8_t>>> DropoutMasks();

  // The audit's taps (docs/audit.md), run on each range of the local gradients just
  // before it is all-reduced (with buckets, while backward goes on), or on all of them
  // after backward when nothing is all-reduced (ComputeGradients, N = 1). A step with a
  // tap runs eagerly (no graph). With capture on, Step and ComputeGradients copy the local
  // gradients to the host: local_gradients() after the call. A fault (tests only, see
  // JobSlot::SetGradientFaultForTesting) changes them first, as a lying worker would.
  using GradientFault = std::function<absl::Status(Backend&, float* grads, size_t count)>;
  void set_capture_local_gradients(bool on) { capture_ = on; }
  void set_gradient_fault(GradientFault fault) { fault_ = std::move(fault); }
  const std::vector<float>& local_gradients() const { return local_grads_; }
  // StepReplicas's BatchNorm taps: each local replica's contributions to the exact sums
  // (per BatchNorm layer its moments [E[x], E[x^2]] over its rows, and in backward its
  // sums of dy and dy * (x - mean), 2c floats each) before they are summed. With capture
  // on, the first local replica's are copied to the host: local_statistics() after the
  // call, per BatchNorm layer in layer order 4c floats (moments, then sums; zeros where a
  // layer sums none). The fault (tests only, see JobSlot::SetStatisticsFaultForTesting)
  // changes each contribution first, the ride-along's too, as a lying worker would.
  void set_statistics_fault(GradientFault fault) { statistics_fault_ = std::move(fault); }
  const std::vector<float>& local_statistics() const { return local_stats_; }

  // Loss and accuracy over examples [begin, end) of `data` (all of it by default),
  // deterministic (no dropout), in batches.
  absl::StatusOr<EvalMetrics> Evaluate(const DeviceDataset& data, int batch_size = 1000,
                                       int64_t begin = 0, int64_t end = -1);
  // Why steps run eagerly although graphs were asked for: the failed capture's error, or OK
  // (graphs in use, not asked for, or not supported by the backend).
  const absl::Status& graph_fallback() const { return graph_fallback_; }

  // Where the last Step's time went, in seconds, by the host clock: exact for synchronous
  // backends, enqueue times for asynchronous ones, and all 0 for a graph replay. compute:
  // forward and backward (with starting the buckets' all-reduces); allreduce: the exposed
  // all-reduce, from the end of backward until every bucket is done; update: the optimizer
  // (pmean's division by N included) and the running averages.
  struct Timings {
    double compute = 0, allreduce = 0, update = 0;
  };
  const Timings& last_timings() const { return timings_; }

 private:
  struct Workspace;
  StepExecutor(Model model, Optimizer optimizer, rng::Impl impl, int local_batch, Backend* backend,
               Collective* collective, CollectiveOptions options, bool use_graphs);
  absl::StatusOr<Workspace*> GetWorkspace(int batch, bool train);
  absl::StatusOr<std::unique_ptr<Workspace>> NewWorkspace(int batch, bool train);
  // StepReplicas's parts (step_replicas.cc): forward and backward of the local replicas
  // layer by layer, their BatchNorm layers reduced exactly across all of them, the
  // gradients summed exactly into grads_.
  // `ride_data`: the ride-along replica's dataset, while riding_.
  absl::Status ForwardReplicas(const DeviceDataset& data, const DeviceDataset* ride_data);
  // Calls layer_done(i) once layer i's parameter gradients are done on every local replica
  // (when given; maybe again once its backward is: it must be idempotent).
  absl::Status BackwardReplicas(const std::function<void(int)>& layer_done = {});
  // Backward of the local replicas with the gradients' exact sum (into grads_) in buckets
  // that start as backward completes them, where the sum runs on the collective's thread
  // (ExactSum::overlaps; buckets_ at multiples of its block, so that the bits are one sum's);
  // else one sum after backward. `shared` (ShareReplicaMetrics) rides along; `backward_end`:
  // when backward was done.
  absl::Status BackwardReplicasSummed(std::vector<int64_t>& shared,
                                      std::chrono::steady_clock::time_point& backward_end);
  absl::Status BatchNormForwardReplicas(size_t i);
  absl::Status BatchNormBackwardReplicas(int i);
  // The BatchNorm taps (set_statistics_fault) on layer i's contributions at `local` (2c
  // floats each; part 0: moments, 1: backward sums), the first copied into `host` when
  // `capture`.
  absl::Status StatisticsTaps(size_t i, int part, const std::vector<float*>& local, bool capture,
                              std::vector<float>& host);
  // Allocates the ride-along replica's workspace, gradients and keys (once) and prepares
  // it for this step.
  absl::Status PrepareRideAlong(const RideAlong& ride);
  // After Prepare: the keys it wrote into step_args_, to a replica's buffer `to`.
  absl::Status CopyKeys(Buffer& to);
  // StepReplicas once the local replicas (and the ride-along) are prepared.
  absl::StatusOr<StepMetrics> StepReplicasRiding(const DeviceDataset& data,
                                                 const RideAlong* ride_along);
  // Sums `size` floats at each of `local` (one per local replica) exactly over all the
  // job's logical replicas into every one of them.
  absl::Status ExactSumInto(const std::vector<float*>& local, size_t size);
  // ExactSum::Sum over all the job's logical replicas, on the host or in backend memory.
  absl::Status SumExactly(std::span<const float* const> local, size_t n, float* out,
                          std::span<int64_t> also_max = {});
  // The local replicas' losses and accuracies as the gradient sum's max slots (2V int64s:
  // V losses, then V accuracies; the float bits, INT64_MIN in the other ranks' slots), and
  // back once reduced: all V of each, DATA_LOSS if a slot came back empty.
  std::vector<int64_t> ShareReplicaMetrics(const StepMetrics& local) const;
  absl::StatusOr<std::pair<std::vector<float>, std::vector<float>>> UnshareReplicaMetrics(
      const std::vector<int64_t>& slots) const;
  // A training step's host part: checks the batch, then Prepare.
  absl::StatusOr<Workspace*> PrepareStep(const DeviceDataset& data,
                                         std::span<const int32_t> indices, rng::Key dropout_key);
  // Host part before a step: indices and per-step scalars into backend memory.
  absl::Status Prepare(Workspace& ws, const DeviceDataset& data, std::span<const int32_t> indices,
                       rng::Key dropout_key);
  // Runs the device step as a graph (capturing it first where needed); false when this
  // step must run eagerly instead. Errors: the capture body's or the launch's.
  absl::StatusOr<bool> ReplayGraph(Workspace& ws, const DeviceDataset& data);
  // Device part: no host synchronization, so a backend can capture it as a graph. Errors
  // here and below: the backend's kernels' (each names its primitive) and the collective's.
  absl::Status DeviceStep(Workspace& ws, const DeviceDataset& data, bool update);
  // Errors: the kernels' and the collective's (BatchNorm's statistics, N > 1).
  absl::Status Forward(Workspace& ws, const DeviceDataset& data, int batch, bool train);
  // Forward's parts: the batch's rows and labels into ws; layer i (`keys`: one per Dropout
  // layer); the loss.
  absl::Status GatherBatch(Workspace& ws, const DeviceDataset& data, int batch);
  absl::Status ForwardLayer(Workspace& ws, size_t i, int batch, bool train, const rng::Key* keys);
  absl::Status ForwardLayerF32(Workspace& ws, size_t i, int batch, bool train,
                               const rng::Key* keys);
  // Mixed precision (step_bf16.cc; docs/models.md#mixed-precision). The params as
  // bfloat16 into params_bf16_ (each forward pass); a param's there.
  absl::Status RefreshBf16Params();
  const Bf16* Bf16Param(int index) const;
  // Layer i's input as Bf16 (a bf16 matmul layer's): its input's twin, else xb[i], which
  // Bf16Input fills first.
  const Bf16* Bf16InputOf(const Workspace& ws, size_t i) const;
  absl::StatusOr<const Bf16*> Bf16Input(Workspace& ws, size_t i, int batch);
  // Whether layer l runs kernels of its own in bfloat16 (ForwardLayerBf16), rather than
  // the float32 ones, rounded once after (ForwardLayer) or exact in bfloat16.
  bool HasBf16Kernels(const Layer& l) const;
  absl::Status ForwardLayerBf16(Workspace& ws, size_t i, int batch, bool train,
                                const rng::Key* keys);
  absl::Status DenseBackwardBf16(Workspace& ws, int i, int batch, const float* dy, float* dx,
                                 float* grads, const std::function<void(int)>& grads_ready);
  absl::Status ConvBackwardBf16(Workspace& ws, int i, int batch, const float* dy, float* dx,
                                float* grads, const std::function<void(int)>& grads_ready);
  absl::Status AttentionForwardBf16(Workspace& ws, size_t i, int b, bool train, const float* x,
                                    const rng::Key* key);
  absl::Status AttentionBackwardBf16(Workspace& ws, size_t i, int b, const float* dy, float* grads,
                                     float* dx);
  // Attention's projection j (q, k or v) backward from its gradient dz, float32 and as
  // bfloat16 (dz16, written from dz first where `round`): the kernel's and bias's
  // gradients, and dx (j == 0 overwrites it).
  absl::Status QkvBackwardBf16(Workspace& ws, size_t i, int b, const float* dz, bool round,
                               Bf16* dz16, int j, float* grads, float* dx);
  absl::Status Loss(Workspace& ws, int batch);
  // Layer `layer`'s output in ws (-1: the batch's input); a layer's input.
  const float* Output(const Workspace& ws, int layer) const;
  const float* Input(const Workspace& ws, const Layer& l) const { return Output(ws, l.src); }
  // Backward's step through layer i, given ws.dy[i]: parameter gradients into `grads`
  // (the layout's offsets), the input gradient (ws.din[i], or dy changed in place)
  // delivered to the layer it came from.
  absl::Status BackwardLayer(Workspace& ws, int i, int batch, float* grads,
                             const std::function<void(int)>& grads_ready);
  // Clears ws.dy but for the last layer's: the loss's gradient.
  void StartBackward(Workspace& ws) const;
  // Hands `g` (n floats), one reader's gradient with respect to layer `target`'s output,
  // to ws.dy[target], adding it to another reader's already there (into g). Nothing
  // when backward does not need it (target -1: the input).
  absl::Status Deliver(Workspace& ws, int target, float* g, size_t n);
  // Calls grads_ready(i) (when given) once layer i's parameter gradients are computed, in
  // the order backward reaches the layers (last first).
  absl::Status Backward(Workspace& ws, int batch, const std::function<void(int)>& grads_ready = {});
  // The gradients' all-reduce (sum) in buckets overlapping Backward; see DeviceStep.
  absl::Status BackwardAllReduced(Workspace& ws,
                                  std::chrono::steady_clock::time_point& backward_end);
  // BatchNorm layer i on `rows` rows (step_batch_norm.cc). ws.bn[i] holds the layer's
  // BatchNormBuffer floats: its moments (all-reduced), var, backward sums and partials.
  absl::Status BatchNormForward(Workspace& ws, size_t i, int rows, bool train);
  // Its output y from x and the batch's (or running) mean and var: BatchNormApply, or for
  // a bfloat16 layer BatchNormApplyBf16 with the ReLU after it where FusedReluBf16.
  absl::Status BatchNormApply(Workspace& ws, size_t i, int rows, const float* x, const float* mean,
                              const float* var);
  // Backward: dx, or where the input is a conv's unrounded sums only its bfloat16 copy
  // dyb, which that conv's backward reads (ConvBackwardBf16).
  absl::Status BatchNormBackward(const Layer& l, int rows, const float* x, const float* dy,
                                 float* dx, Bf16* dyb, float* bn);
  // Backend::BatchNormMoments, BatchNormBackwardReduce and BatchNormBackwardApply for
  // BatchNorm l (its workspace `bn`), or their Bf16 forms where l's input is a conv's
  // unrounded sums (unrounded_: the last then writes dyb, not dx).
  absl::Status BatchNormMomentsOf(const Layer& l, int rows, const float* x, float* bn);
  absl::Status BatchNormReduceOf(const Layer& l, int rows, const float* x, const float* dy,
                                 float* bn, float* grads);
  absl::Status BatchNormApplyGradOf(const Layer& l, int rows, int replicas, const float* x,
                                    const float* dy, const float* bn, float* dx, Bf16* dyb);
  // Attention layer `i` at batch b (step_attention.cc): its workspace ws.scratch[i] keeps
  // what backward needs; `key` its 'dropout' key (train with dropout only). Backward
  // writes its parameter gradients into `grads`, dx unless null.
  absl::Status AttentionForward(Workspace& ws, size_t i, int b, bool train, const float* x,
                                const rng::Key* key);
  absl::Status AttentionBackward(Workspace& ws, size_t i, int b, const float* x, const float* dy,
                                 float* grads, float* dx);
  // The running averages from the last forward pass's statistics (`bn`: per layer, its
  // BatchNorm workspace), for every BatchNorm.
  absl::Status UpdateBatchStats(const std::vector<float*>& bn);
  int replicas() const { return collective_ != nullptr ? collective_->size() : 1; }
  // The taps on grads [offset, offset + count) (see set_gradient_fault).
  absl::Status BeforeReduce(size_t offset, size_t count);
  // Host part after a step: the local loss and accuracy.
  absl::StatusOr<StepMetrics> Finish(Workspace& ws, int batch);
  // Calls f(buffer, offset in it, state offset, bytes) for each buffer [offset, offset + size)
  // overlaps, in order.
  absl::Status ForStateRange(
      uint64_t offset, uint64_t size,
      const std::function<absl::Status(float*, uint64_t, uint64_t, uint64_t)>& f);

  Model model_;
  Optimizer optimizer_;
  rng::Impl impl_;
  int local_batch_;
  Backend* backend_;
  Collective* collective_;
  CollectiveOptions collective_options_;
  bool use_graphs_;
  bool warmed_up_ = false;       // an eager step has run (graphs are captured after one)
  absl::Status graph_fallback_;  // see graph_fallback()
  int64_t step_ = 0;
  Timings timings_;
  std::vector<GradBucket> buckets_;  // empty: one all-reduce after backward
  Buffer params_, grads_;
  Buffer params_bf16_;  // the params as bfloat16, for a model with bfloat16 layers
  Buffer stats_;        // batch_stats (Model::stats_layout()), when the model has any
  // Per-step arguments in backend memory: UpdateScalars, then one key per Dropout layer.
  Buffer step_args_;
  Buffer update_scratch_;          // Optimizer::ScratchBytes (clipping's partial sums), if any
  std::vector<int> dropout_slot_;  // per layer: index of its key, or -1 (DrawsDropoutKey)
  // Per layer: a bfloat16 conv that leaves its sums unrounded for the BatchNorm after it
  // (step_internal::ConvSumsUnrounded, on a backend that takes them).
  std::vector<bool> unrounded_;
  std::unique_ptr<Backend::Graph> graph_;
  const DeviceDataset* graph_data_ = nullptr;
  std::vector<Buffer> slots_;
  std::vector<float> host_params_;  // ParamChecksum's copy: params, then batch_stats
  bool capture_ = false;            // the audit's taps (set_capture_local_gradients)
  GradientFault fault_;
  std::vector<float> local_grads_;
  std::unique_ptr<Workspace> train_ws_, eval_ws_;
  // Logical replicas (SetLogicalReplicas); total == 0: none.
  struct LogicalRange {
    int total = 0, first = 0, count = 0;
  };
  LogicalRange logical_;
  std::unique_ptr<ExactSum> exact_;               // on a backend with host memory
  std::unique_ptr<DeviceExactSum> device_exact_;  // on another (see SumExactly)
  bool exact_in_backend_ = false;                 // set_exact_sum_in_backend_memory_for_testing
  std::vector<std::unique_ptr<Workspace>> replica_ws_;  // one per local replica
  std::vector<Buffer> replica_grads_;  // replicas 1..count-1's gradients (replica 0: grads_)
  std::vector<Buffer> replica_keys_;   // per local replica: one key per Dropout layer
  GradientFault statistics_fault_;     // set_statistics_fault
  std::vector<float> local_stats_;     // local_statistics()
  // The ride-along replica (StepReplicas): its workspace, gradients and keys, allocated at
  // the first; riding_ while a step computes it.
  std::unique_ptr<Workspace> ride_ws_;
  Buffer ride_grads_, ride_keys_;
  bool riding_ = false;
  RideAlongResult ride_along_result_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_STEP_H_
