// StepExecutor's use of graphs, on the CPU: an eager warm-up step before the capture, and
// an eager fallback when a capture fails. The CPU backend has no graphs, so the tests run
// it behind GraphCpuBackend, a CPU model of CUDA graphs (kernels recorded while capturing,
// run on Launch) whose captures can be made to fail as a launch refused during a CUDA
// capture does: after the body has queued its work, none of which has run.
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "core/data/random_dataset.h"
#include "core/optimizer_spec.h"
#include "core/plan.h"
#include "core/step.h"
#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

class GraphCpuBackend final : public Backend {
 public:
  GraphCpuBackend() : cpu_(NewCpuBackend(1)) {}

  // When set, the next captures record their body and then fail with this status.
  absl::Status capture_fault;
  // When set, the kernel called fail_kernel ("Gemm", ...) fails with kernel_fault when it
  // runs (eagerly, or in a graph's launch), as a refused oneDNN primitive or CUDA launch.
  std::string fail_kernel;
  absl::Status kernel_fault;
  int captures = 0;  // Capture calls
  int launches = 0;  // graph launches

  std::string Name() const override { return "graph-cpu"; }
  absl::StatusOr<Buffer> Allocate(size_t bytes) override { return cpu_->Allocate(bytes); }
  absl::StatusOr<Buffer> Upload(const void* host, size_t bytes) override {
    return cpu_->Upload(host, bytes);
  }
  absl::Status CopyToDevice(void* dst, const void* host, size_t bytes) override {
    return Host(cpu_->CopyToDevice(dst, host, bytes));
  }
  absl::Status CopyToHost(void* host, const void* src, size_t bytes) override {
    return Host(cpu_->CopyToHost(host, src, bytes));
  }
  absl::Status Synchronize() override { return Host(cpu_->Synchronize()); }

  absl::Status Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) override {
    return Queue("Gemm", [=, this] { return cpu_->Gemm(ta, tb, m, n, k, alpha, a, b, beta, c); });
  }
  absl::Status Im2Col(const ConvGeometry& g, const float* x, float* cols) override {
    return Queue("Im2Col", [=, this] { return cpu_->Im2Col(g, x, cols); });
  }
  absl::Status Col2Im(const ConvGeometry& g, const float* dcols, float* dx) override {
    return Queue("Col2Im", [=, this] { return cpu_->Col2Im(g, dcols, dx); });
  }
  absl::Status BiasAdd(int rows, int cols, const float* bias, float* y) override {
    return Queue("BiasAdd", [=, this] { return cpu_->BiasAdd(rows, cols, bias, y); });
  }
  absl::Status BiasGrad(int rows, int cols, const float* dy, float* db) override {
    return Queue("BiasGrad", [=, this] { return cpu_->BiasGrad(rows, cols, dy, db); });
  }
  absl::Status Relu(size_t n, float* x) override {
    return Queue("Relu", [=, this] { return cpu_->Relu(n, x); });
  }
  absl::Status ReluBackward(size_t n, const float* y, float* dy) override {
    return Queue("ReluBackward", [=, this] { return cpu_->ReluBackward(n, y, dy); });
  }
  absl::Status Activate(Activation a, size_t n, const float* x, float* y) override {
    return Queue("Activate", [=, this] { return cpu_->Activate(a, n, x, y); });
  }
  absl::Status ActivateBackward(Activation a, size_t n, const float* x, float* dy) override {
    return Queue("ActivateBackward", [=, this] { return cpu_->ActivateBackward(a, n, x, dy); });
  }
  absl::Status AvgPool(const ConvGeometry& g, bool count_include_pad, const float* x,
                       float* y) override {
    return Queue("AvgPool", [=, this] { return cpu_->AvgPool(g, count_include_pad, x, y); });
  }
  absl::Status AvgPoolBackward(const ConvGeometry& g, bool count_include_pad, const float* dy,
                               float* dx) override {
    return Queue("AvgPoolBackward",
                 [=, this] { return cpu_->AvgPoolBackward(g, count_include_pad, dy, dx); });
  }
  absl::Status MaxPool(const ConvGeometry& g, const float* x, float* y) override {
    return Queue("MaxPool", [=, this] { return cpu_->MaxPool(g, x, y); });
  }
  absl::Status MaxPoolBackward(const ConvGeometry& g, const float* x, const float* dy,
                               float* dx) override {
    return Queue("MaxPoolBackward", [=, this] { return cpu_->MaxPoolBackward(g, x, dy, dx); });
  }
  absl::Status LayerNorm(int rows, int cols, float epsilon, const float* x, const float* scale,
                         const float* bias, float* y, float* mean, float* rstd) override {
    return Queue("LayerNorm", [=, this] {
      return cpu_->LayerNorm(rows, cols, epsilon, x, scale, bias, y, mean, rstd);
    });
  }
  absl::Status LayerNormBackward(int rows, int cols, const float* x, const float* scale,
                                 const float* mean, const float* rstd, const float* dy, float* dx,
                                 float* dscale, float* dbias) override {
    return Queue("LayerNormBackward", [=, this] {
      return cpu_->LayerNormBackward(rows, cols, x, scale, mean, rstd, dy, dx, dscale, dbias);
    });
  }
  absl::Status BatchNormMoments(int rows, int cols, const float* x, float* partials,
                                float* moments) override {
    return Queue("BatchNormMoments",
                 [=, this] { return cpu_->BatchNormMoments(rows, cols, x, partials, moments); });
  }
  absl::Status BatchNormVariance(int cols, const float* moments, float* var) override {
    return Queue("BatchNormVariance",
                 [=, this] { return cpu_->BatchNormVariance(cols, moments, var); });
  }
  absl::Status BatchNormApply(int rows, int cols, float epsilon, const float* x, const float* mean,
                              const float* var, const float* scale, const float* bias,
                              float* y) override {
    return Queue("BatchNormApply", [=, this] {
      return cpu_->BatchNormApply(rows, cols, epsilon, x, mean, var, scale, bias, y);
    });
  }
  absl::Status BatchNormUpdateStats(int cols, float momentum, float one_minus_momentum,
                                    const float* mean, const float* var, float* ra_mean,
                                    float* ra_var) override {
    return Queue("BatchNormUpdateStats", [=, this] {
      return cpu_->BatchNormUpdateStats(cols, momentum, one_minus_momentum, mean, var, ra_mean,
                                        ra_var);
    });
  }
  absl::Status BatchNormBackwardReduce(int rows, int cols, float epsilon, const float* x,
                                       const float* dy, const float* mean, const float* var,
                                       float* partials, float* sums, float* dscale,
                                       float* dbias) override {
    return Queue("BatchNormBackwardReduce", [=, this] {
      return cpu_->BatchNormBackwardReduce(rows, cols, epsilon, x, dy, mean, var, partials, sums,
                                           dscale, dbias);
    });
  }
  absl::Status BatchNormBackwardApply(int rows, int cols, float epsilon, int replicas,
                                      const float* x, const float* dy, const float* moments,
                                      const float* var, const float* scale, const float* sums,
                                      float* dx) override {
    return Queue("BatchNormBackwardApply", [=, this] {
      return cpu_->BatchNormBackwardApply(rows, cols, epsilon, replicas, x, dy, moments, var, scale,
                                          sums, dx);
    });
  }
  absl::Status Dropout(size_t n, float keep, const rng::Key* key, rng::Impl impl, const float* x,
                       float* y, uint8_t* mask) override {
    return Queue("Dropout", [=, this] { return cpu_->Dropout(n, keep, key, impl, x, y, mask); });
  }
  absl::Status DropoutBackward(size_t n, float keep, const uint8_t* mask, const float* dy,
                               float* dx) override {
    return Queue("DropoutBackward",
                 [=, this] { return cpu_->DropoutBackward(n, keep, mask, dy, dx); });
  }
  absl::Status SoftmaxCrossEntropy(int b, int classes, const float* logits, const int32_t* labels,
                                   float* loss, float* dlogits, float* correct) override {
    return Queue("SoftmaxCrossEntropy", [=, this] {
      return cpu_->SoftmaxCrossEntropy(b, classes, logits, labels, loss, dlogits, correct);
    });
  }
  absl::Status GatherRows(size_t row, int n, const int32_t* idx, const float* table,
                          float* out) override {
    return Queue("GatherRows", [=, this] { return cpu_->GatherRows(row, n, idx, table, out); });
  }
  absl::Status GatherLabels(int n, const int32_t* idx, const int32_t* table,
                            int32_t* out) override {
    return Queue("GatherLabels", [=, this] { return cpu_->GatherLabels(n, idx, table, out); });
  }
  absl::Status Copy(size_t n, const float* x, float* y) override {
    return Queue("Copy", [=, this] { return cpu_->Copy(n, x, y); });
  }
  absl::Status Add(size_t n, const float* a, const float* b, float* y) override {
    return Queue("Add", [=, this] { return cpu_->Add(n, a, b, y); });
  }
  absl::Status Divide(size_t n, float d, float* x) override {
    return Queue("Divide", [=, this] { return cpu_->Divide(n, d, x); });
  }
  absl::Status SumSquares(size_t n, const float* x, double* partials, double* out) override {
    return Queue("SumSquares", [=, this] { return cpu_->SumSquares(n, x, partials, out); });
  }
  absl::Status ClipByGlobalNorm(size_t n, float max_norm, const double* sum_squares,
                                float* x) override {
    return Queue("ClipByGlobalNorm",
                 [=, this] { return cpu_->ClipByGlobalNorm(n, max_norm, sum_squares, x); });
  }
  absl::Status SgdUpdate(size_t n, const UpdateScalars* s, float momentum, bool nesterov,
                         const float* g, float* trace, float* p) override {
    return Queue("SgdUpdate",
                 [=, this] { return cpu_->SgdUpdate(n, s, momentum, nesterov, g, trace, p); });
  }
  absl::Status AdamUpdate(size_t n, const UpdateScalars* s, const float* g, float* mu, float* nu,
                          float* p) override {
    return Queue("AdamUpdate", [=, this] { return cpu_->AdamUpdate(n, s, g, mu, nu, p); });
  }

  absl::StatusOr<std::unique_ptr<Graph>> Capture(
      const std::function<absl::Status()>& body) override {
    ++captures;
    auto graph = std::make_unique<CpuGraph>(this);
    recording_ = &graph->ops;
    const absl::Status status = body();
    recording_ = nullptr;
    RETURN_IF_ERROR(status);
    RETURN_IF_ERROR(capture_fault);  // the recorded ops are dropped: none of them ran
    return graph;
  }

 private:
  struct CpuGraph final : Graph {
    explicit CpuGraph(GraphCpuBackend* backend) : backend(backend) {}
    absl::Status Launch() override {
      ++backend->launches;
      for (const auto& op : ops) RETURN_IF_ERROR(op());
      return absl::OkStatus();
    }
    GraphCpuBackend* backend;
    std::vector<std::function<absl::Status()>> ops;
  };

  // Runs `op` (the kernel `kernel`) now, or records it while capturing.
  absl::Status Queue(std::string kernel, std::function<absl::Status()> op) {
    std::function<absl::Status()> run = [this, kernel = std::move(kernel), op = std::move(op)] {
      if (kernel == fail_kernel) return kernel_fault;
      return op();
    };
    if (recording_ == nullptr) return run();
    recording_->push_back(std::move(run));
    return absl::OkStatus();
  }
  // Host calls are refused while capturing, as CUDA refuses synchronization.
  absl::Status Host(absl::Status status) {
    if (recording_ != nullptr) return absl::FailedPreconditionError("host call while capturing");
    return status;
  }

  std::unique_ptr<Backend> cpu_;
  std::vector<std::function<absl::Status()>>* recording_ = nullptr;
};

// A 2-rank collective whose peer is gone once `fail` is set; until then the sum over
// both ranks is twice this rank's values.
class FakeCollective final : public Collective {
 public:
  std::string Name() const override { return "fake"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  absl::Status AllReduceSum(float* data, size_t n, const CollectiveOptions&) override {
    if (fail) return absl::UnavailableError("peer 1 is gone");
    for (size_t i = 0; i < n; ++i) data[i] += data[i];
    return absl::OkStatus();
  }
  void Abort(const absl::Status&) override {}
  bool fail = false;
};

Optimizer Adam() {
  v1::OptimizerSpec spec;
  spec.set_kind("adam");
  spec.set_learning_rate(1e-3);
  return *OptimizerFromSpec(spec);
}

// sgd with Nesterov momentum, a learning rate that changes every step (piecewise
// constant) and clipping at a norm the gradients exceed: per-step values again.
Optimizer SgdScheduleClip() {
  v1::OptimizerSpec spec;
  spec.set_kind("sgd");
  spec.set_momentum(0.9);
  spec.set_nesterov(true);
  spec.set_clip_by_global_norm(0.5);
  auto* piecewise = spec.mutable_schedule()->mutable_piecewise_constant();
  piecewise->set_init_value(0.1);
  for (int step = 1; step < 8; ++step) (*piecewise->mutable_boundaries_and_scales())[step] = 0.7;
  return *OptimizerFromSpec(spec);
}

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Two executors on the same plan, the MLP with dropout (per-step keys in backend memory,
// which a replay must read afresh) and adam (per-step scalars likewise): one on
// GraphCpuBackend with graphs, one on the plain CPU backend without.
class StepCaptureTest : public ::testing::Test {
 protected:
  static constexpr int kBatch = 32;

  void SetUp() override { UseOptimizer(Adam()); }

  void UseOptimizer(Optimizer optimizer) {
    optimizer_ = std::move(optimizer);
    TrainingPlan init_plan(0, 1, impl_, data_.size, kBatch, 1);
    init_ = TrainState::Create(model_.Init(init_plan.init_key(), impl_), optimizer_);
  }

  struct Replica {
    std::unique_ptr<StepExecutor> exec;
    DeviceDataset data;
  };
  Replica Make(Backend* backend, bool graphs, Collective* collective = nullptr) {
    Replica r;
    auto exec =
        StepExecutor::Create(model_, optimizer_, impl_, kBatch, backend, collective, {}, graphs);
    EXPECT_TRUE(exec.ok()) << exec.status();
    r.exec = std::move(exec).value();
    auto data = r.exec->Upload(data_);
    EXPECT_TRUE(data.ok()) << data.status();
    r.data = std::move(data).value();
    EXPECT_TRUE(r.exec->SetState(init_).ok());
    return r;
  }

  // Runs `steps` steps of the plan on both (on their own datasets unless given others);
  // the losses must agree bitwise.
  void RunBoth(Replica& a, Replica& b, int steps, TrainingPlan& plan,
               const DeviceDataset* a_data = nullptr, const DeviceDataset* b_data = nullptr) {
    for (int s = 0; s < steps; ++s) {
      const StepPlan p = plan.Next();
      absl::StatusOr<StepMetrics> x = a.exec->Step(a_data ? *a_data : a.data, p.indices, p.keys[0]);
      absl::StatusOr<StepMetrics> y = b.exec->Step(b_data ? *b_data : b.data, p.indices, p.keys[0]);
      ASSERT_TRUE(x.ok()) << x.status();
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_EQ(std::memcmp(&x->loss, &y->loss, sizeof(float)), 0) << "step " << s;
    }
  }

  void ExpectSameState(Replica& a, Replica& b) {
    absl::StatusOr<TrainState> x = a.exec->GetState(), y = b.exec->GetState();
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(x->step, y->step);
    EXPECT_TRUE(Bitwise(x->params, y->params));
    EXPECT_FALSE(Bitwise(x->params, init_.params));  // the steps did update the params
    for (size_t i = 0; i < x->slots.size(); ++i) EXPECT_TRUE(Bitwise(x->slots[i], y->slots[i]));
  }

  const rng::Impl impl_ = rng::Impl::kPartitionable;
  const Model model_ = Model::Mlp({64, 32}, 0.3);
  const Dataset data_ = RandomDataset(256, 1);
  Optimizer optimizer_;
  TrainState init_;
  GraphCpuBackend graph_backend_;
  std::unique_ptr<Backend> cpu_ = NewCpuBackend(1);
};

// Step 1 runs eagerly (the warm-up), step 2 is captured and launched, later steps replay
// the graph: bitwise the eager executor's steps.
TEST_F(StepCaptureTest, WarmsUpEagerlyThenCapturesOnceAndReplaysBitwise) {
  Replica graph = Make(&graph_backend_, true), eager = Make(cpu_.get(), false);
  TrainingPlan plan(3, 4, impl_, data_.size, kBatch, 1);
  RunBoth(graph, eager, 1, plan);
  EXPECT_EQ(graph_backend_.captures, 0);
  RunBoth(graph, eager, 1, plan);
  EXPECT_EQ(graph_backend_.captures, 1);
  EXPECT_EQ(graph_backend_.launches, 1);
  RunBoth(graph, eager, 4, plan);
  EXPECT_EQ(graph_backend_.captures, 1);
  EXPECT_EQ(graph_backend_.launches, 5);
  EXPECT_TRUE(graph.exec->graph_fallback().ok()) << graph.exec->graph_fallback();
  ExpectSameState(graph, eager);
}

// The learning rate is a per-step value too: a replay reads each step's (a graph that
// froze the captured step's would drift from eager execution), and the clipping's sums
// replay with it.
TEST_F(StepCaptureTest, ReplaysReadEachStepsScheduledLearningRate) {
  UseOptimizer(SgdScheduleClip());
  Replica graph = Make(&graph_backend_, true), eager = Make(cpu_.get(), false);
  TrainingPlan plan(3, 4, impl_, data_.size, kBatch, 1);
  RunBoth(graph, eager, 6, plan);
  EXPECT_EQ(graph_backend_.captures, 1);
  EXPECT_EQ(graph_backend_.launches, 5);
  ExpectSameState(graph, eager);
}

// A capture that fails after its body queued the step (a launch refused during a CUDA
// capture): that step and all later ones run eagerly, with the same bits, and the
// failure is kept for graph_fallback().
TEST_F(StepCaptureTest, FailedCaptureFallsBackToEagerWithTheSameBits) {
  graph_backend_.capture_fault =
      absl::InternalError("cudaLaunchKernel: cudaErrorStreamCaptureInvalidated (injected)");
  Replica graph = Make(&graph_backend_, true), eager = Make(cpu_.get(), false);
  TrainingPlan plan(3, 4, impl_, data_.size, kBatch, 1);
  RunBoth(graph, eager, 6, plan);
  EXPECT_EQ(graph_backend_.captures, 1);  // tried once, never again
  EXPECT_EQ(graph_backend_.launches, 0);
  EXPECT_THAT(graph.exec->graph_fallback(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("StreamCaptureInvalidated")));
  ExpectSameState(graph, eager);
}

// The capture body's own error (the collective's) is the step's error, not a reason to
// run the step again eagerly.
TEST_F(StepCaptureTest, TheBodysErrorFailsTheStep) {
  FakeCollective collective;
  Replica graph = Make(&graph_backend_, true, &collective);
  TrainingPlan plan(3, 4, impl_, data_.size, kBatch, 1);
  StepPlan p = plan.Next();
  ASSERT_OK_AND_ASSIGN(StepMetrics warm_up, graph.exec->Step(graph.data, p.indices, p.keys[0]));
  EXPECT_GT(warm_up.loss, 0.0f);
  collective.fail = true;
  p = plan.Next();
  EXPECT_THAT(graph.exec->Step(graph.data, p.indices, p.keys[0]),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("peer 1 is gone")));
  EXPECT_EQ(graph_backend_.captures, 1);
  EXPECT_EQ(graph_backend_.launches, 0);
  EXPECT_TRUE(graph.exec->graph_fallback().ok()) << graph.exec->graph_fallback();
}

// Another dataset needs another graph (pointers are frozen at capture); the warm-up is
// not repeated.
TEST_F(StepCaptureTest, RecapturesForAnotherDataset) {
  Replica graph = Make(&graph_backend_, true), eager = Make(cpu_.get(), false);
  TrainingPlan plan(3, 4, impl_, data_.size, kBatch, 1);
  RunBoth(graph, eager, 3, plan);
  ASSERT_OK_AND_ASSIGN(DeviceDataset other, graph.exec->Upload(data_));
  ASSERT_OK_AND_ASSIGN(DeviceDataset other_eager, eager.exec->Upload(data_));
  RunBoth(graph, eager, 2, plan, &other, &other_eager);
  EXPECT_EQ(graph_backend_.captures, 2);
  EXPECT_EQ(graph_backend_.launches, 4);
  ExpectSameState(graph, eager);
}

// A kernel that fails (a oneDNN primitive refused) fails the step with its error, and
// the process and the executor live on: the next step runs.
TEST_F(StepCaptureTest, AFailingKernelFailsTheEagerStepWithItsStatus) {
  Replica eager = Make(&graph_backend_, false);
  TrainingPlan plan(3, 4, impl_, data_.size, kBatch, 1);
  graph_backend_.fail_kernel = "Gemm";
  graph_backend_.kernel_fault =
      absl::InternalError("cpu: dnnl_sgemm (32 x 64 x 784) failed: oneDNN status 5 (injected)");
  StepPlan p = plan.Next();
  EXPECT_THAT(eager.exec->Step(eager.data, p.indices, p.keys[0]),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("dnnl_sgemm")));
  EXPECT_EQ(eager.exec->step(), 0);  // not counted
  graph_backend_.fail_kernel.clear();
  p = plan.Next();
  EXPECT_OK(eager.exec->Step(eager.data, p.indices, p.keys[0]));
  EXPECT_EQ(eager.exec->step(), 1);
}

// In a replayed graph, the failing kernel's error is the launch's, hence the step's.
TEST_F(StepCaptureTest, AFailingKernelFailsTheReplayedStepWithItsStatus) {
  Replica graph = Make(&graph_backend_, true);
  TrainingPlan plan(3, 4, impl_, data_.size, kBatch, 1);
  for (int s = 0; s < 2; ++s) {  // the warm-up, then the capture and its first launch
    const StepPlan p = plan.Next();
    ASSERT_OK(graph.exec->Step(graph.data, p.indices, p.keys[0]));
  }
  graph_backend_.fail_kernel = "AdamUpdate";
  graph_backend_.kernel_fault =
      absl::ResourceExhaustedError("AdamUpdate: out of memory (injected)");
  const StepPlan p = plan.Next();
  EXPECT_THAT(graph.exec->Step(graph.data, p.indices, p.keys[0]),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("AdamUpdate")));
  EXPECT_EQ(graph_backend_.captures, 1);
  EXPECT_EQ(graph_backend_.launches, 2);
}

// The plain CPU backend has no graphs (UNIMPLEMENTED): eager, and no fallback to report.
TEST_F(StepCaptureTest, NoGraphsOnThePlainCpuBackend) {
  Replica graph = Make(cpu_.get(), true), eager = Make(cpu_.get(), false);
  TrainingPlan plan(3, 4, impl_, data_.size, kBatch, 1);
  RunBoth(graph, eager, 3, plan);
  EXPECT_TRUE(graph.exec->graph_fallback().ok()) << graph.exec->graph_fallback();
  ExpectSameState(graph, eager);
}

}  // namespace
}  // namespace lockstep
