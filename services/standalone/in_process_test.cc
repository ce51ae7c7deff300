// The coordinator's job loop against real replicas in this process (JobSlots on the CPU,
// Gloo on loopback between them): data-parallel equivalence without processes, and
// cancellation at random moments of a job's life.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/checkpoint.h"
#include "core/data/dataset.h"
#include "core/data/idx.h"
#include "core/data/npz_testing.h"
#include "core/io/safetensors.h"
#include "core/spec/spec.h"
#include "core/spec/testing.h"
#include "core/status_macros.h"
#include "core/testing.h"
#include "services/coordinator/job_manager.h"
#include "services/coordinator/job_records.h"
#include "services/coordinator/snapshot_store.h"
#include "services/standalone/testing.h"
#include "workers/gloo/stray_connection_store.h"

namespace lockstep::testing {
namespace {

class Recorder final : public JobSink {
 public:
  void OnRunning(int64_t) override {}
  void OnStep(const v1::StepEvent& e) override { steps.push_back(e); }
  void OnEval(const v1::EvalResult&) override {}
  std::vector<v1::StepEvent> steps;
};

std::string TempDir(const std::string& name) {
  const std::string d =
      (std::filesystem::temp_directory_path() / absl::StrCat("lockstep-", name, "-", getpid()))
          .string();
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

TEST(InProcessJobLoop, TwoWorkersEndWithOneWorkersParams) {
  const std::string dir = TempDir("inproc");
  CoordinatorOptions options;
  options.checkpoint_dir = dir;
  std::vector<std::vector<float>> params;
  for (int n : {1, 2}) {
    InProcessWorkers workers(n);
    Recorder sink;
    JobRunner runner(absl::StrCat("job-", n), SmallMlpSpec(n, 20), workers.pool_workers(),
                     workers.factory(), options, &sink);
    JobOutcome out;
    ASSERT_OK(runner.Run(&out));
    ASSERT_EQ(sink.steps.size(), 20u);
    for (const v1::StepEvent& s : sink.steps) {
      ASSERT_EQ(s.local_losses_size(), n);
      float sum = 0;
      for (float l : s.local_losses()) sum += l;
      EXPECT_EQ(s.loss(), sum / static_cast<float>(n));
    }
    ASSERT_OK_AND_ASSIGN(TrainSetup setup, SetupFromSpec(SmallMlpSpec(n, 20)));
    ASSERT_OK_AND_ASSIGN(TrainState state,
                         ReadCheckpoint(out.checkpoint_path, setup.model, setup.optimizer));
    EXPECT_EQ(state.step, 20);
    EXPECT_EQ(ParamChecksum(state.params), out.param_checksum);
    params.push_back(state.params);
  }
  EXPECT_LE(RelativeL2(params[1], params[0]), 1e-5);
  std::filesystem::remove_all(dir);
}

// A 2-worker MLP job with dropout (so that the per-worker keys matter) of `steps` steps.
v1::JobSpec DropoutSpec(int steps, const std::string& checkpoint, const std::string& from = "") {
  v1::JobSpec spec = SmallMlpSpec(2, steps);
  spec.mutable_model()->set_dropout_rate(0.2);
  spec.set_checkpoint_path(checkpoint);
  spec.set_resume_from(from);
  return spec;
}

// Runs `spec` as job `job_id` (by default its checkpoint_path): the job's files are in
// CHECKPOINT_DIR/JOB_ID/.
absl::StatusOr<JobOutcome> RunJob(const v1::JobSpec& spec, const CoordinatorOptions& options,
                                  Recorder* sink, std::string job_id = "") {
  InProcessWorkers workers(static_cast<int>(spec.workers()));
  if (job_id.empty()) job_id = spec.checkpoint_path();
  JobRunner runner(job_id, spec, workers.pool_workers(), workers.factory(), options, sink);
  JobOutcome out;
  RETURN_IF_ERROR(runner.Run(&out));
  return out;
}

TEST(InProcessJobLoop, ResumeFromACheckpointEndsBitwiseWhereAnUninterruptedRunDoes) {
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("resume");
  Recorder straight_sink, first_sink, resumed_sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome straight,
                       RunJob(DropoutSpec(30, "straight"), options, &straight_sink));
  ASSERT_OK(RunJob(DropoutSpec(12, "first"), options, &first_sink).status());
  ASSERT_OK_AND_ASSIGN(JobOutcome resumed,
                       RunJob(DropoutSpec(30, "resumed", "first/first"), options, &resumed_sink));
  ASSERT_EQ(resumed_sink.steps.size(), 18u);
  EXPECT_EQ(resumed_sink.steps.front().step(), 13);
  EXPECT_EQ(resumed_sink.steps.back().loss(), straight_sink.steps.back().loss());
  EXPECT_EQ(resumed.param_checksum, straight.param_checksum);
  ASSERT_OK_AND_ASSIGN(TrainSetup setup, SetupFromSpec(DropoutSpec(30, "")));
  ASSERT_OK_AND_ASSIGN(TrainState a,
                       ReadCheckpoint(straight.checkpoint_path, setup.model, setup.optimizer));
  ASSERT_OK_AND_ASSIGN(TrainState b,
                       ReadCheckpoint(resumed.checkpoint_path, setup.model, setup.optimizer));
  EXPECT_EQ(b.step, 30);
  EXPECT_TRUE(a.params == b.params);
  EXPECT_TRUE(a.slots == b.slots);  // the optimizer state too

  // Other settings continue no Lockstep state: the error says what differs and what to do.
  v1::JobSpec other_lr = DropoutSpec(30, "other", "first/first");
  other_lr.mutable_optimizer()->set_learning_rate(0.01);
  Recorder unused;
  EXPECT_THAT(RunJob(other_lr, options, &unused),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(::testing::HasSubstr("resume_from"),
                                        ::testing::HasSubstr("optimizer"),
                                        ::testing::HasSubstr("params-only"))));
  std::filesystem::remove_all(options.checkpoint_dir);
}

TEST(InProcessJobLoop, StrayConnectionsToTheCollectiveListenersCostTheJobNothing) {
  // Issue 22, item 4: while the workers bootstrap their collective, every listener they
  // publish gets random bytes, a half-open connection, a plausible peer address, a wrong
  // pairing token and a connection closed at once, all queued ahead of the real peer.
  // The job needs no recovery (it has no spare workers: any would fail it) and ends
  // bitwise where the undisturbed one does.
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("stray");
  Recorder calm_sink, attacked_sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome calm, RunJob(DropoutSpec(10, "calm"), options, &calm_sink));
  MemoryStore memory;
  StrayConnectionStore stray(&memory);
  InProcessWorkers workers(2, &stray);
  JobRunner runner("attacked", DropoutSpec(10, "attacked"), workers.pool_workers(),
                   workers.factory(), options, &attacked_sink);
  JobOutcome attacked;
  ASSERT_OK(runner.Run(&attacked));
  EXPECT_GE(stray.connected(), 5) << "the attack reached no listener";
  EXPECT_EQ(attacked.recoveries, 0);
  EXPECT_EQ(attacked.param_checksum, calm.param_checksum);
  ASSERT_EQ(attacked_sink.steps.size(), calm_sink.steps.size());
  EXPECT_EQ(attacked_sink.steps.back().loss(), calm_sink.steps.back().loss());
  std::filesystem::remove_all(options.checkpoint_dir);
}

TEST(InProcessJobLoop, JobsNamingTheSameCheckpointWriteInTheirOwnFoldersAndResumeFromThem) {
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("own-folders");
  Recorder sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome one,
                       RunJob(DropoutSpec(6, "model.safetensors"), options, &sink, "job-000001"));
  ASSERT_OK_AND_ASSIGN(JobOutcome two,
                       RunJob(DropoutSpec(8, "model.safetensors"), options, &sink, "job-000002"));
  EXPECT_EQ(one.checkpoint_path, options.checkpoint_dir + "/job-000001/model.safetensors");
  EXPECT_EQ(two.checkpoint_path, options.checkpoint_dir + "/job-000002/model.safetensors");
  ASSERT_OK_AND_ASSIGN(TrainSetup setup, SetupFromSpec(DropoutSpec(6, "")));
  ASSERT_OK_AND_ASSIGN(TrainState first,
                       ReadCheckpoint(one.checkpoint_path, setup.model, setup.optimizer));
  EXPECT_EQ(first.step, 6);  // not overwritten by the second job
  // Another job's file by JOB/NAME, or by its id; a name climbing out is refused.
  Recorder resumed;
  ASSERT_OK(
      RunJob(DropoutSpec(8, "", "job-000001/model.safetensors"), options, &resumed, "job-000003")
          .status());
  EXPECT_EQ(resumed.steps.front().step(), 7);
  Recorder by_id;
  ASSERT_OK(RunJob(DropoutSpec(8, "", "job-000001"), options, &by_id, "job-000004").status());
  EXPECT_EQ(by_id.steps.front().step(), 7);
  Recorder unused;
  EXPECT_THAT(
      RunJob(DropoutSpec(8, "../x"), options, &unused, "job-000005"),
      StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("checkpoint_path")));
  std::filesystem::remove_all(options.checkpoint_dir);
}

TEST(InProcessJobLoop, AParamsOnlyFileFineTunesFromStepZero) {
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("finetune");
  Recorder trained_sink, fresh_sink, tuned_sink;
  ASSERT_OK_AND_ASSIGN(JobOutcome trained,
                       RunJob(DropoutSpec(60, "trained"), options, &trained_sink));
  // Params only, as Python writes them: flatten_dict({"params": params}, sep=".").
  ASSERT_OK_AND_ASSIGN(SafeTensors full, SafeTensors::Read(trained.checkpoint_path));
  SafeTensors params_only;
  for (const auto& [name, t] : full.tensors()) {
    if (!absl::StartsWith(name, "params.")) continue;
    ASSERT_OK_AND_ASSIGN(std::vector<float> v, full.F32(name));
    params_only.AddF32(name, t.shape, v);
  }
  ASSERT_OK(params_only.Write(options.checkpoint_dir + "/params.safetensors"));

  v1::JobSpec tune = DropoutSpec(5, "tuned", "params.safetensors");
  tune.mutable_optimizer()->set_learning_rate(1e-4);  // other settings are fine here
  ASSERT_OK(RunJob(DropoutSpec(5, "fresh"), options, &fresh_sink).status());
  ASSERT_OK(RunJob(tune, options, &tuned_sink).status());
  ASSERT_EQ(tuned_sink.steps.size(), 5u);
  EXPECT_EQ(tuned_sink.steps.front().step(), 1);
  // Its first step starts from trained params, not from the seed's initialization.
  EXPECT_LT(tuned_sink.steps.front().loss(), 0.8 * fresh_sink.steps.front().loss());
  std::filesystem::remove_all(options.checkpoint_dir);
}

TEST(InProcessJobLoop, ADivergingJobFailsNamingTheStepAndSavesNothing) {
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("diverge");
  v1::JobSpec spec = DropoutSpec(20, "diverged");
  spec.mutable_optimizer()->set_learning_rate(1e30);
  Recorder sink;
  EXPECT_THAT(RunJob(spec, options, &sink), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                     ::testing::HasSubstr("diverged at step")));
  EXPECT_FALSE(std::filesystem::exists(options.checkpoint_dir + "/diverged/diverged"));
  std::filesystem::remove_all(options.checkpoint_dir);
}

TEST(InProcessJobLoop, ACheckpointPathThatCannotTakeTheCheckpointFailsBeforeTraining) {
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("unwritable");
  std::filesystem::create_directories(options.checkpoint_dir + "/job-1");
  std::ofstream(options.checkpoint_dir + "/job-1/taken") << "a file already there";
  Recorder sink;
  EXPECT_THAT(RunJob(DropoutSpec(5, "taken"), options, &sink, "job-1"),
              StatusIs(absl::StatusCode::kAlreadyExists, ::testing::HasSubstr("taken")));
  // A folder that is a file (no permission bits stop root, this does).
  EXPECT_THAT(
      RunJob(DropoutSpec(5, "taken/x.safetensors"), options, &sink, "job-1"),
      StatusIs(absl::StatusCode::kPermissionDenied, ::testing::HasSubstr("taken/x.safetensors")));
  EXPECT_TRUE(sink.steps.empty());
  EXPECT_EQ(ReadAll(options.checkpoint_dir + "/job-1/taken"), "a file already there");
  std::filesystem::remove_all(options.checkpoint_dir);
}

// Fashion-MNIST's IDX files written as one .npz per split into `dir` (uint8 images
// [N, 28, 28, 1], int64 labels; the training split STORED as np.savez writes it, the test
// split DEFLATED as np.savez_compressed does); a 2-worker MLP spec of 20 steps reading them.
v1::JobSpec FashionMnistAsNpzSpec(const std::string& dir) {
  for (const auto& [split, compressed] : {std::pair("train", false), std::pair("t10k", true)}) {
    const std::string idx = absl::StrCat(kDefaultDatasetPath, "/", split);
    absl::StatusOr<IdxArray> images = ReadIdx(idx + "-images-idx3-ubyte.gz", 3);
    absl::StatusOr<IdxArray> labels = ReadIdx(idx + "-labels-idx1-ubyte.gz", 1);
    EXPECT_OK(images);
    EXPECT_OK(labels);
    if (!images.ok() || !labels.ok()) return {};
    const int64_t n = images->dims[0];
    const std::vector<int64_t> wide(labels->data.begin(), labels->data.end());
    WriteFile(absl::StrCat(dir, "/", split, ".npz"),
              NpzBytes(NpyBytes("|u1", {n, 28, 28, 1},
                                std::string(images->data.begin(), images->data.end())),
                       NpyBytes("<i8", {n}, RawBytes(wide)), compressed));
  }
  return ValidSpec(absl::StrCat(R"(
model: {kind: mlp, hidden: [32]}
optimizer: {kind: adam, learning_rate: 0.001}
dataset: {format: npz, train_path: )",
                                dir, "/train.npz, test_path: ", dir, R"(/t10k.npz}
global_batch_size: 32
eval: {every_steps: 10, batch_size: 500}
steps: 20
workers: 2
)"));
}

class EvalRecorder final : public JobSink {
 public:
  void OnRunning(int64_t) override {}
  void OnStep(const v1::StepEvent& e) override { losses.push_back(e.loss()); }
  void OnEval(const v1::EvalResult& e) override { evals.push_back(e.test_loss()); }
  std::vector<float> losses;
  std::vector<double> evals;
};

TEST(InProcessJobLoop, AnNpzDatasetTrainsBitForBitAsTheSameImagesFromIdx) {
  const std::string dir = TempDir("npz");
  const v1::JobSpec npz = FashionMnistAsNpzSpec(dir);
  v1::JobSpec idx = npz;
  idx.clear_dataset();
  ASSERT_OK_AND_ASSIGN(idx, Validate(idx));
  CoordinatorOptions options;
  options.checkpoint_dir = dir;
  std::vector<EvalRecorder> sinks(2);
  std::vector<uint64_t> checksums;
  for (int i = 0; i < 2; ++i) {
    InProcessWorkers workers(2);
    JobRunner runner(absl::StrCat("job-", i), i == 0 ? idx : npz, workers.pool_workers(),
                     workers.factory(), options, &sinks[i]);
    JobOutcome out;
    ASSERT_OK(runner.Run(&out));
    checksums.push_back(out.param_checksum);
  }
  ASSERT_EQ(sinks[1].losses.size(), 20u);
  EXPECT_EQ(sinks[1].losses, sinks[0].losses);
  EXPECT_EQ(sinks[1].evals, sinks[0].evals);
  EXPECT_EQ(checksums[1], checksums[0]);
  std::filesystem::remove_all(dir);
}

TEST(InProcessJobLoop, AnNpzDatasetTheModelDoesNotFitFailsTheJobNamingFileAndArray) {
  const std::string dir = TempDir("npz-misfit");
  const auto write = [&](const std::string& name, int channels, uint8_t label) {
    WriteFile(dir + "/" + name,
              NpzBytes(NpyBytes("|u1", {64, 28, 28, channels}, std::string(64 * 784 * channels, 1)),
                       NpyBytes("|u1", {64}, std::string(64, static_cast<char>(label)))));
  };
  write("rgb.npz", 3, 1);
  write("eleven.npz", 1, 10);
  write("ok.npz", 1, 9);
  const auto spec = [&](const std::string& train, const std::string& test = "ok.npz") {
    return ValidSpec(absl::StrCat(
        "model: {kind: mlp, hidden: [8]}\n", "optimizer: {kind: sgd, learning_rate: 0.1}\n",
        "dataset: {format: npz, train_path: ", dir, "/", train, ", test_path: ", dir, "/", test,
        "}\n", "global_batch_size: 32\nsteps: 2\n"));
  };
  CoordinatorOptions options;
  options.checkpoint_dir = dir;
  Recorder sink;
  EXPECT_THAT(RunJob(spec("rgb.npz", "rgb.npz"), options, &sink, "rgb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(::testing::HasSubstr("dataset.train_path: "),
                                        ::testing::HasSubstr("rgb.npz: array 'image'"),
                                        ::testing::HasSubstr("28x28x3 (HxWxC), the model takes "
                                                             "28x28x1"))));
  EXPECT_THAT(RunJob(spec("eleven.npz"), options, &sink, "eleven"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(::testing::HasSubstr("eleven.npz: array 'label'"),
                                        ::testing::HasSubstr("label 10 at index 0 is not in "
                                                             "[0, 10)"))));
  EXPECT_TRUE(sink.steps.empty());
  ASSERT_OK(RunJob(spec("ok.npz"), options, &sink, "ok"));
  EXPECT_EQ(sink.steps.size(), 2u);
  std::filesystem::remove_all(dir);
}

// Counts the moments of a job's life at which a cancel can land (each worker call, each
// step sent and answered) and fires `at(k)` at the k-th, without waiting for it.
class Moments {
 public:
  void Arm(int64_t k, std::function<void()> fire) {
    count_ = 0;
    k_ = k;
    fire_ = std::move(fire);
  }
  void Tick() {
    if (count_.fetch_add(1) == k_) fired_ = std::thread(fire_);
  }
  int64_t count() const { return count_; }
  void Join() {
    if (fired_.joinable()) fired_.join();
  }

 private:
  std::atomic<int64_t> count_{0};
  int64_t k_ = -1;
  std::function<void()> fire_;
  std::thread fired_;
};

class TickingStream final : public StepStream {
 public:
  TickingStream(std::unique_ptr<StepStream> inner, Moments* m) : inner_(std::move(inner)), m_(m) {}
  bool Send(const StepCommand& c) override {
    m_->Tick();
    return inner_->Send(c);
  }
  void CloseSend() override { inner_->CloseSend(); }
  absl::StatusOr<StepResult> Receive(absl::Duration timeout) override {
    auto r = inner_->Receive(timeout);
    m_->Tick();
    return r;
  }
  void Cancel() override { inner_->Cancel(); }

 private:
  std::unique_ptr<StepStream> inner_;
  Moments* m_;
};

class TickingClient final : public WorkerClient {
 public:
  TickingClient(std::unique_ptr<WorkerClient> inner, Moments* m)
      : inner_(std::move(inner)), m_(m) {}
  absl::StatusOr<PrepareResult> Prepare(const JobAssignment& job,
                                        std::shared_ptr<const SharedState> state,
                                        const CancelToken& cancel, absl::Duration t) override {
    m_->Tick();
    return inner_->Prepare(job, std::move(state), cancel, t);
  }
  absl::StatusOr<std::unique_ptr<StepStream>> OpenSteps(const std::string& id,
                                                        const CancelToken& cancel,
                                                        absl::Duration t) override {
    m_->Tick();
    auto s = inner_->OpenSteps(id, cancel, t);
    if (!s.ok()) return s.status();
    return std::unique_ptr<StepStream>(new TickingStream(std::move(s).value(), m_));
  }
  absl::StatusOr<EvalSums> Evaluate(const std::string& id, int64_t b, int64_t e,
                                    const CancelToken& cancel, absl::Duration t) override {
    m_->Tick();
    return inner_->Evaluate(id, b, e, cancel, t);
  }
  absl::StatusOr<TrainState> FetchState(const std::string& id, const CancelToken& cancel,
                                        absl::Duration t) override {
    m_->Tick();
    return inner_->FetchState(id, cancel, t);
  }
  absl::Status Release(const std::string& id, const std::string& why, absl::Duration t) override {
    return inner_->Release(id, why, t);
  }
  bool Alive(absl::Duration t) override { return inner_->Alive(t); }

 private:
  std::unique_ptr<WorkerClient> inner_;
  Moments* m_;
};

class TickingFactory final : public WorkerClientFactory {
 public:
  TickingFactory(WorkerClientFactory* inner, Moments* m) : inner_(inner), m_(m) {}
  std::unique_ptr<WorkerClient> Connect(const std::string& address) override {
    return std::make_unique<TickingClient>(inner_->Connect(address), m_);
  }

 private:
  WorkerClientFactory* inner_;
  Moments* m_;
};

// Waits, without sleeping, until the job's event log closes (the job ended).
absl::StatusOr<v1::Job> AwaitEnd(JobManager& jobs, const std::string& id, absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::unique_ptr<JobManager::Watch> watch, jobs.StartWatch(id));
  // Shared with the wake-up, which may run once more after the handle is dropped.
  struct Woken {
    absl::Mutex mu;
    bool woke ABSL_GUARDED_BY(mu) = false;
  };
  auto woken = std::make_shared<Woken>();
  EventLog::Wake wake = watch->log()->Subscribe([woken] {
    absl::MutexLock lock(&woken->mu);
    woken->woke = true;
  });
  const absl::Time end = absl::Now() + timeout;
  int64_t cursor = 0;
  while (true) {
    EventLog::Batch b = watch->log()->Read(cursor, 0, 0, 1000);
    cursor = b.next;
    if (b.closed) return jobs.Get(id);
    absl::MutexLock lock(&woken->mu);
    if (!woken->mu.AwaitWithDeadline(absl::Condition(&woken->woke), end)) {
      return absl::DeadlineExceededError(absl::StrCat(id, " did not end"));
    }
    woken->woke = false;
  }
}

TEST(JobManagerCancel, FiftyRandomMomentsEachEndCancelledWithinTwoSeconds) {
  InProcessWorkers workers(2);
  Moments moments;
  TickingFactory factory(workers.factory(), &moments);
  WorkerPool pool(absl::Hours(1));
  for (const PoolWorker& w : workers.pool_workers()) pool.Register(w.address, "cpu", w.id, 1);
  CoordinatorOptions options;
  options.checkpoint_dir = TempDir("cancel");  // so that FetchState is a moment too
  JobManager jobs(options, &pool, nullptr, &factory);
  ASSERT_OK(jobs.Start());

  // An undisturbed run tells how many moments a job has.
  ASSERT_OK_AND_ASSIGN(v1::Job first, jobs.Submit(SmallMlpSpec(2, 12)));
  ASSERT_OK_AND_ASSIGN(v1::Job ended, AwaitEnd(jobs, first.id(), absl::Minutes(1)));
  ASSERT_EQ(ended.state(), v1::SUCCEEDED) << ended.failure_reason();
  const int64_t total = moments.count();
  ASSERT_GT(total, 20);

  std::mt19937 rng(20261130);
  std::vector<double> latencies_ms;
  int too_late = 0;
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t k = std::uniform_int_distribution<int64_t>(0, total - 1)(rng);
    std::string id;
    absl::Notification submitted, cancelled;
    absl::Time cancel_at;
    absl::Status cancel_status;
    moments.Arm(k, [&] {
      submitted.WaitForNotification();
      cancel_at = absl::Now();
      cancel_status = jobs.Cancel(id).status();
      cancelled.Notify();
    });
    ASSERT_OK_AND_ASSIGN(v1::Job job, jobs.Submit(SmallMlpSpec(2, 12)));
    id = job.id();
    submitted.Notify();
    ASSERT_OK_AND_ASSIGN(v1::Job done, AwaitEnd(jobs, id, absl::Minutes(1)));
    const absl::Time end_at = absl::Now();
    if (moments.count() <= k) {
      // The job ended before its k-th moment (a run takes a few more or fewer of them).
      EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
      moments.Arm(-1, nullptr);
      continue;
    }
    cancelled.WaitForNotification();
    moments.Join();
    if (!cancel_status.ok()) {
      EXPECT_EQ(cancel_status.code(), absl::StatusCode::kFailedPrecondition) << cancel_status;
      EXPECT_EQ(done.state(), v1::SUCCEEDED);
      ++too_late;
      continue;
    }
    EXPECT_EQ(done.state(), v1::CANCELLED)
        << "moment " << k << ": " << done.failure_code() << " " << done.failure_reason();
    EXPECT_EQ(done.failure_reason(), "cancelled by the user");
    const absl::Duration latency = end_at - cancel_at;
    EXPECT_LT(latency, absl::Seconds(2)) << "moment " << k;
    latencies_ms.push_back(absl::ToDoubleMilliseconds(latency));
  }
  moments.Join();
  ASSERT_FALSE(latencies_ms.empty());
  std::sort(latencies_ms.begin(), latencies_ms.end());
  std::printf(
      "cancel latency over %zu cancels of running jobs (%d came after the end): "
      "median %.1f ms, max %.1f ms (%lld moments per job)\n",
      latencies_ms.size(), too_late, latencies_ms[latencies_ms.size() / 2], latencies_ms.back(),
      static_cast<long long>(total));
  // The workers are free again: a last job runs to the end.
  ASSERT_OK_AND_ASSIGN(v1::Job last, jobs.Submit(SmallMlpSpec(2, 4)));
  moments.Arm(-1, nullptr);
  ASSERT_OK_AND_ASSIGN(v1::Job last_done, AwaitEnd(jobs, last.id(), absl::Minutes(1)));
  EXPECT_EQ(last_done.state(), v1::SUCCEEDED) << last_done.failure_reason();
  std::filesystem::remove_all(options.checkpoint_dir);
}

using ::testing::_;
using ::testing::HasSubstr;

// The job's events until `done` holds for one (returned) or the log closes (NOT_FOUND).
absl::StatusOr<v1::JobEvent> AwaitEvent(JobManager& jobs, const std::string& id,
                                        absl::Duration timeout,
                                        const std::function<bool(const v1::JobEvent&)>& done,
                                        std::vector<v1::JobEvent>* seen = nullptr) {
  ASSIGN_OR_RETURN(std::unique_ptr<JobManager::Watch> watch, jobs.StartWatch(id));
  struct Woken {
    absl::Mutex mu;
    bool woke ABSL_GUARDED_BY(mu) = false;
  };
  auto woken = std::make_shared<Woken>();
  EventLog::Wake wake = watch->log()->Subscribe([woken] {
    absl::MutexLock lock(&woken->mu);
    woken->woke = true;
  });
  const absl::Time end = absl::Now() + timeout;
  for (int64_t cursor = 0;;) {
    EventLog::Batch b = watch->log()->Read(cursor, 0, 0, 1000);
    cursor = b.next;
    for (const v1::JobEvent& e : b.events) {
      if (seen != nullptr) seen->push_back(e);
      if (done(e)) return e;
    }
    if (b.closed) return absl::NotFoundError(absl::StrCat(id, " ended"));
    absl::MutexLock lock(&woken->mu);
    if (!woken->mu.AwaitWithDeadline(absl::Condition(&woken->woke), end)) {
      return absl::DeadlineExceededError(absl::StrCat(id, ": no such event in time"));
    }
    woken->woke = false;
  }
}

// A coordinator's records, snapshots and checkpoints in one folder; its pool; its manager.
struct Coordinator {
  Coordinator(const CoordinatorOptions& options, InProcessWorkers* workers, bool with_workers)
      : pool(absl::Hours(1)), jobs(options, &pool, nullptr, workers->factory()) {
    if (with_workers) Register(*workers);
  }
  void Register(InProcessWorkers& workers) {
    for (const PoolWorker& w : workers.pool_workers()) pool.Register(w.address, "cpu", w.id, 1);
    jobs.Kick();
  }
  WorkerPool pool;
  JobManager jobs;
};

CoordinatorOptions DrainOptions(const std::string& dir) {
  CoordinatorOptions options;
  options.checkpoint_dir = dir + "/checkpoints";
  options.records_dir = dir + "/jobs";
  options.snapshot_dir = dir + "/snapshots";
  return options;
}

// The params' checksum of an undisturbed run of `spec`, on a coordinator of its own.
uint64_t UndisturbedChecksum(InProcessWorkers& workers, const v1::JobSpec& spec) {
  const std::string dir = TempDir("undisturbed");
  uint64_t sum = 0;
  {
    Coordinator c(DrainOptions(dir), &workers, true);
    EXPECT_OK(c.jobs.Start());
    absl::StatusOr<v1::Job> job = c.jobs.Submit(spec);
    EXPECT_OK(job.status());
    absl::StatusOr<v1::Job> done = AwaitEnd(c.jobs, job->id(), absl::Minutes(2));
    EXPECT_OK(done.status());
    EXPECT_EQ(done->state(), v1::SUCCEEDED) << done->failure_reason();
    sum = done->param_checksum();
  }
  std::filesystem::remove_all(dir);
  return sum;
}

auto StepAtLeast(int64_t n) {
  return [n](const v1::JobEvent& e) { return e.has_step() && e.step().step() >= n; };
}

TEST(JobManagerDrain, ADrainedJobSnapshotsWaitsRecoveringAndEndsBitForBitAfterARestart) {
  InProcessWorkers workers(2);
  v1::JobSpec spec = SmallMlpSpec(2, 40);
  // No snapshot but the drain's: the restart continues from the one it took.
  spec.mutable_recovery()->set_snapshot_every_steps(100000);
  spec.mutable_recovery()->set_snapshot_every_seconds(100000);
  const uint64_t clean = UndisturbedChecksum(workers, spec);
  ASSERT_NE(clean, 0u);

  const std::string dir = TempDir("drain");
  const CoordinatorOptions options = DrainOptions(dir);
  std::string id, queued_id;
  int64_t drained_at = 0;
  {
    Coordinator c(options, &workers, true);
    ASSERT_OK(c.jobs.Start());
    ASSERT_OK_AND_ASSIGN(v1::Job job, c.jobs.Submit(spec));
    id = job.id();
    ASSERT_OK(AwaitEvent(c.jobs, id, absl::Minutes(1), StepAtLeast(8)).status());
    ASSERT_OK_AND_ASSIGN(v1::Job queued, c.jobs.Submit(SmallMlpSpec(2, 4)));  // workers busy
    queued_id = queued.id();
    ASSERT_EQ(queued.state(), v1::QUEUED);
    const absl::Time t0 = absl::Now();
    ASSERT_OK(c.jobs.Drain(t0 + absl::Seconds(20)));
    const absl::Duration took = absl::Now() - t0;
    std::printf("drain of a running job: %.0f ms\n", absl::ToDoubleMilliseconds(took));
    EXPECT_LT(took, absl::Seconds(5));
    ASSERT_OK_AND_ASSIGN(v1::Job drained, c.jobs.Get(id));
    EXPECT_EQ(drained.state(), v1::RECOVERING);  // CANCELLED at 400deec
    EXPECT_THAT(drained.failure_reason(),
                HasSubstr(absl::StrCat("continues from its snapshot of step ", drained.step())));
    EXPECT_EQ(drained.snapshot_step(), drained.step());
    EXPECT_GE(drained.step(), 8);
    EXPECT_LT(drained.step(), 40);
    drained_at = drained.step();
    EXPECT_EQ(c.jobs.Get(queued_id)->state(), v1::QUEUED);  // not started by the drain
    const std::vector<int64_t> kept = SnapshotStore(options.snapshot_dir + "/" + id, 1).Steps();
    ASSERT_FALSE(kept.empty());
    EXPECT_EQ(kept.back(), drained_at);
  }
  Coordinator c(options, &workers, false);  // its workers come later
  ASSERT_OK(c.jobs.Start());
  ASSERT_OK_AND_ASSIGN(v1::Job waiting, c.jobs.Get(id));
  EXPECT_EQ(waiting.state(), v1::RECOVERING);  // QUEUED at step 0 at 400deec
  EXPECT_EQ(waiting.step(), drained_at);
  EXPECT_THAT(waiting.failure_reason(), HasSubstr("the coordinator restarted"));
  c.Register(workers);
  std::vector<v1::JobEvent> events;  // all of them, until the job's log closes
  EXPECT_THAT(AwaitEvent(
                  c.jobs, id, absl::Minutes(2), [](const v1::JobEvent&) { return false; }, &events),
              StatusIs(absl::StatusCode::kNotFound, _));
  ASSERT_OK_AND_ASSIGN(v1::Job done, c.jobs.Get(id));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_EQ(done.param_checksum(), clean);
  for (const v1::JobEvent& e : events) {  // it continued where it stopped: nothing replayed
    if (e.has_step()) EXPECT_FALSE(e.step().replay()) << e.step().step();
  }
  ASSERT_OK_AND_ASSIGN(v1::Job queued_done, AwaitEnd(c.jobs, queued_id, absl::Minutes(2)));
  EXPECT_EQ(queued_done.state(), v1::SUCCEEDED) << queued_done.failure_reason();
  std::filesystem::remove_all(dir);
}

TEST(JobManagerDrain, AManagerStoppedWithoutADrainKeepsItsJobWhichReplaysVisibly) {
  InProcessWorkers workers(2);
  v1::JobSpec spec = SmallMlpSpec(2, 30);
  spec.mutable_recovery()->set_snapshot_every_steps(5);
  const uint64_t clean = UndisturbedChecksum(workers, spec);

  const std::string dir = TempDir("stop");
  const CoordinatorOptions options = DrainOptions(dir);
  std::string id;
  int64_t stopped_at = 0;
  {
    Coordinator c(options, &workers, true);
    ASSERT_OK(c.jobs.Start());
    ASSERT_OK_AND_ASSIGN(v1::Job job, c.jobs.Submit(spec));
    id = job.id();
    ASSERT_OK(AwaitEvent(c.jobs, id, absl::Minutes(1), StepAtLeast(12)).status());
  }  // ~JobManager: CANCELLED at 400deec
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> on_disk, JobRecords(options.records_dir).Load());
  ASSERT_EQ(on_disk.size(), 1u);
  EXPECT_EQ(on_disk[0].state(), v1::RECOVERING);
  stopped_at = on_disk[0].step();
  ASSERT_GE(stopped_at, 12);

  Coordinator c(options, &workers, true);
  ASSERT_OK(c.jobs.Start());
  std::vector<v1::JobEvent> events;
  EXPECT_THAT(AwaitEvent(
                  c.jobs, id, absl::Minutes(2), [](const v1::JobEvent&) { return false; }, &events),
              StatusIs(absl::StatusCode::kNotFound, _));
  ASSERT_OK_AND_ASSIGN(v1::Job done, c.jobs.Get(id));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_EQ(done.param_checksum(), clean);
  // From the snapshot of step 10 (or later): the steps up to where it stopped are
  // replays, and shown as such; the rest are not.
  int replays = 0;
  for (const v1::JobEvent& e : events) {
    if (!e.has_step()) continue;
    EXPECT_EQ(e.step().replay(), e.step().step() <= stopped_at) << e.step().step();
    replays += e.step().replay();
  }
  EXPECT_GT(replays, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lockstep::testing
