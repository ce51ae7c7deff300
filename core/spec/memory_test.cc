#include "core/spec/memory.h"

#include "core/model_spec.h"
#include "core/spec/testing.h"
#include "core/step.h"

namespace lockstep::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// 784-10000-9000-10: 97,949,010 parameters, under the default max_params of 100M.
v1::JobSpec Big(const std::string& optimizer) {
  return ValidSpec(absl::StrCat(R"(
model: {kind: mlp, hidden: [10000, 9000]}
optimizer: {kind: )",
                                optimizer, R"(, learning_rate: 0.001}
global_batch_size: 64
steps: 10
workers: 2
)"));
}

TEST(Memory, CountsTheTrainStateAsTheCoordinatorAndTheWorkersHoldIt) {
  const v1::JobSpec spec = Big("adam");
  const uint64_t params = 97'949'010 * sizeof(float);
  const MemoryEstimate e = EstimateMemory(spec);
  EXPECT_EQ(e.train_state, 3 * params);  // params, mu, nu
  // 3 copies of the state, and per worker a stream of 1 MiB chunks (4 copies) and the
  // connection.
  EXPECT_EQ(e.coordinator_per_worker, 4 * kMiB + 256 * 1024);
  EXPECT_EQ(e.coordinator, 9 * params + 2 * e.coordinator_per_worker + 32 * kMiB);
  // params, grads, mu, nu, the checksum copy; Gloo's scratch between the 2 workers.
  EXPECT_EQ(e.worker_state, 5 * params + params / 2);
  // 60,000 + 10,000 images of 784 floats and a label.
  EXPECT_EQ(e.worker_dataset, 70'000u * (784 * 4 + 4));
  // A cuda job's state lives in device memory: only the checksum copy is on the host.
  v1::JobSpec cuda = spec;
  cuda.set_device("cuda");
  EXPECT_EQ(EstimateMemory(cuda).worker_state, params);
  EXPECT_EQ(EstimateMemory(cuda).worker_activations, 0u);
}

// A BatchNorm model on logical replicas with the audit on: a checker's ride-along replica
// (one replica's buffers and gradients) on top.
TEST(Memory, ABatchNormModelsAuditCountsTheRideAlongReplica) {
  const std::string bn = R"(
model: {layers: [flatten, dense: {features: 32}, batch_norm: {}, relu, dense: {features: 10}]}
optimizer: {kind: sgd, learning_rate: 0.1}
global_batch_size: 64
steps: 10
workers: 2
replicas: 4
)";
  const v1::JobSpec audited = ValidSpec(bn);
  const v1::JobSpec off = ValidSpec(absl::StrCat(bn, "audit: {every_steps: 0}\n"));
  ASSERT_EQ(audited.audit().every_steps(), 100u);
  const Model model = *ModelFromSpec(audited.model());
  EXPECT_EQ(EstimateMemory(audited).worker_activations, EstimateMemory(off).worker_activations +
                                                            WorkspaceBytes(model, 16, true) +
                                                            model.layout().total() * sizeof(float));
}

TEST(Memory, TheWorkspaceCountsEveryBufferOfTheStep) {
  // 784-32-10 at batch 8, training: input, the two dense outputs, the second dense
  // layer's input gradient (the first one's is not needed), and per-example scalars.
  const Model model = Model::Mlp({32}, 0.0);
  const uint64_t b = 8, f = 4;
  const uint64_t scalars = b * (4 + 4 + f + 10 * f + f) + 2 * b * f;
  EXPECT_EQ(WorkspaceBytes(model, 8, true),
            scalars + b * 784 * f + b * 32 * f + b * 10 * f + b * 32 * f);
  EXPECT_EQ(WorkspaceBytes(model, 8, false), scalars + b * 784 * f + b * 32 * f + b * 10 * f);
  // Dropout at training time: its output and mask, and the input gradient below it.
  const Model dropout = Model::Mlp({32}, 0.5);
  EXPECT_EQ(WorkspaceBytes(dropout, 8, true),
            WorkspaceBytes(model, 8, true) + b * 32 * f + b * 32 + b * 32 * f);
  EXPECT_EQ(WorkspaceBytes(dropout, 8, false), WorkspaceBytes(model, 8, false));
}

TEST(Memory, TheNinetyEightMillionParameterModelIsRefusedNamingTheFieldAndBothFigures) {
  for (const std::string optimizer : {"adam", "sgd"}) {
    EXPECT_THAT(CheckMemoryBudget(Big(optimizer), MemoryBudget()),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         AllOf(HasSubstr("model.hidden"), HasSubstr("on the coordinator"),
                               HasSubstr("over the coordinator's budget of 768 MiB"),
                               HasSubstr("--job_memory_budget_mb"))))
        << optimizer;
  }
  // Its workers need about 2.5 GiB each (2,392 MiB measured): with room on the
  // coordinator, a 2 GiB worker budget says no, the state weighing most.
  MemoryBudget roomy;
  roomy.coordinator_per_job = 0;
  EXPECT_THAT(CheckMemoryBudget(Big("adam"), roomy), IsOk());
  roomy.worker = uint64_t{2048} << 20;
  EXPECT_THAT(
      CheckMemoryBudget(Big("adam"), roomy),
      StatusIs(absl::StatusCode::kResourceExhausted,
               AllOf(HasSubstr("model.hidden: the job needs about 2"), HasSubstr("on each worker"),
                     HasSubstr("budget of 2048 MiB"), HasSubstr("--worker_memory_budget_mb"))));
}

TEST(Memory, BigBatchesAreRefusedNamingTheirField) {
  v1::JobSpec spec = ValidSpec(R"(
model: {kind: cnn}
optimizer: {kind: sgd, learning_rate: 0.1}
global_batch_size: 16384
steps: 10
)");
  EXPECT_THAT(CheckMemoryBudget(spec, MemoryBudget()),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("global_batch_size: the job needs about"),
                             HasSubstr("on each worker"))));
  spec.set_workers(16);  // 1024 examples each
  EXPECT_THAT(CheckMemoryBudget(spec, MemoryBudget()), IsOk());
  spec.mutable_eval()->set_batch_size(10000);  // a worker evaluates up to 625 at a time
  EXPECT_THAT(CheckMemoryBudget(spec, MemoryBudget()), IsOk());
  spec.set_workers(1);
  spec.set_global_batch_size(64);
  EXPECT_THAT(CheckMemoryBudget(spec, MemoryBudget()),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("eval.batch_size")));
}

TEST(Memory, TheDatasetCountsAsItsSizeOnceKnownAndALargeOneIsRefusedNamingItsFile) {
  const v1::JobSpec spec = ValidSpec(R"(
model: {kind: mlp, hidden: [32]}
optimizer: {kind: sgd, learning_rate: 0.1}
dataset: {format: npz, train_path: /data/train.npz, test_path: /data/test.npz}
global_batch_size: 64
steps: 10
)");
  // At submit: MNIST-sized; then the sizes the workers report.
  EXPECT_EQ(EstimateMemory(spec).worker_dataset, 70'000u * (784 * 4 + 4));
  EXPECT_EQ(EstimateMemory(spec, {1'000'000, 5}).worker_dataset, 1'000'005u * (784 * 4 + 4));
  EXPECT_THAT(CheckMemoryBudget(spec, MemoryBudget()), IsOk());
  EXPECT_THAT(
      CheckMemoryBudget(spec, MemoryBudget(), {1'200'000, 10'000}),
      StatusIs(absl::StatusCode::kResourceExhausted,
               AllOf(HasSubstr("dataset.train_path: the job needs about"),
                     HasSubstr("dataset 3624 MiB"), HasSubstr("--worker_memory_budget_mb"))));
}

TEST(Memory, TheExamplesFitTheDefaultBudgets) {
  for (const std::string name : {"examples/cnn.yaml", "examples/mlp.yaml", "examples/convnet.yaml",
                                 "examples/npz/fashion_mnist_npz.yaml", "examples/resnet.yaml"}) {
    ASSERT_OK_AND_ASSIGN(v1::JobSpec spec, LoadSpecFile(SourcePath(name)));
    ASSERT_OK_AND_ASSIGN(spec, Validate(spec));
    EXPECT_THAT(CheckMemoryBudget(spec, MemoryBudget()), IsOk()) << name;
  }
}

TEST(Memory, AThousandWorkersOfASmallModelFitTheCoordinatorAndTooManyNameWorkers) {
  // The MNIST CNN's state is over a chunk: 4.25 MiB per worker; an MLP of 12 KiB of
  // state streams it whole: 4 copies and the connection.
  v1::JobSpec small = ValidSpec(R"(
model: {kind: mlp, hidden: [4]}
optimizer: {kind: sgd, learning_rate: 0.1}
global_batch_size: 1024
steps: 10
workers: 64
)");
  small.set_workers(1024);  // over the spec's default cap (--max_workers_per_job raises it)
  const MemoryEstimate e = EstimateMemory(small);
  EXPECT_EQ(e.coordinator_per_worker, 4 * e.train_state + 256 * 1024);
  EXPECT_THAT(CheckMemoryBudget(small, MemoryBudget(), {.train = 60'000, .test = 10'000}), IsOk());
  MemoryBudget tight;
  tight.coordinator_per_job = 64 * kMiB;
  EXPECT_THAT(CheckMemoryBudget(small, tight, {.train = 60'000, .test = 10'000}),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("workers: the job needs about"),
                             HasSubstr("for its workers' streams"))));
}

}  // namespace
}  // namespace lockstep::testing
