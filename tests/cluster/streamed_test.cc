// Streamed datasets across real processes (docs/datasets.md): TFRecord shards of PNGs
// under the workers' data root, decoded and augmented on the workers ahead of each step.
// Two workers train as JAX pmap fed by the reference preprocessing (tools/reference/
// golden_stream.py); a `replicas: 4` job from the shards ends with the same bits on 1, 2
// and 3 workers, in `lockstep train`'s loop and through a worker killed mid-job (the data
// key makes an example's crop the same wherever it is computed); bad shards fail the job
// naming the file, the record and the reason.
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/data/tfrecord_testing.h"
#include "core/io/safetensors.h"
#include "core/model_spec.h"
#include "core/optimizer_spec.h"
#include "tests/cluster/elastic_testing.h"
#include "tests/golden.h"

namespace lockstep::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class Streamed : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(
        (std::filesystem::temp_directory_path() / absl::StrCat("lockstep-streamed-", getpid()))
            .string());
    std::filesystem::create_directories(*root_);
    golden_ = new SafeTensors(*SafeTensors::Read(GoldenPath("stream_pmap2.safetensors")));
    const std::string roots = absl::StrCat("--data_root=", *root_, ",", kDefaultDataRoots);
    ClusterOptions options;
    options.workers = 3;
    options.coordinator_flags = {roots};
    options.worker_flags = {roots};
    auto c = LocalCluster::Start(options);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete golden_;
    std::filesystem::remove_all(*root_);
    delete root_;
  }

  // The golden's PNGs in `prefix` (data. or test.) as records.
  static std::vector<ImageRecord> Records(const std::string& prefix) {
    std::vector<uint8_t> bytes = *golden_->U8(prefix + "png");
    std::vector<int32_t> sizes = *golden_->I32(prefix + "png_sizes");
    std::vector<int32_t> labels = *golden_->I32(prefix + "labels");
    std::vector<ImageRecord> out;
    size_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      out.push_back(
          {std::string(reinterpret_cast<const char*>(bytes.data() + at), sizes[i]), labels[i]});
      at += sizes[i];
    }
    return out;
  }

  // Writes the golden's splits as toy-{train,test}.tfrecord shards (3 and 1) into a new
  // folder of the data root; `train` changes the training records first. The folder.
  static std::string WriteShards(const std::string& name,
                                 const std::function<void(std::vector<ImageRecord>&)>& train = {}) {
    const std::string dir = *root_ + "/" + name;
    std::filesystem::create_directories(dir);
    std::vector<ImageRecord> records = Records("data.");
    if (train) train(records);
    WriteTfRecordShards(dir, "toy", "train", records, 3);
    WriteTfRecordShards(dir, "toy", "test", Records("test."), 1);
    return dir;
  }

  // The golden's spec reading the shards in `dir`.
  static v1::JobSpec Spec(const std::string& dir) {
    absl::StatusOr<v1::JobSpec> spec = ParseSpec(golden_->metadata().at("spec"), "golden spec");
    EXPECT_TRUE(spec.ok()) << spec.status();
    spec->mutable_dataset()->set_path(dir);
    spec->set_threads(1);
    return *spec;
  }

  // The golden's job as a `replicas: 4` job of `steps` steps on `workers`, evaluated every
  // 6 steps, checksummed every step.
  static v1::JobSpec ReplicasSpec(const std::string& dir, const std::string& workers, int steps) {
    v1::JobSpec spec = Spec(dir);
    const std::string extra =
        absl::StrCat("replicas: 4\nsteps: ", steps, "\nworkers: ", workers,
                     "\nchecksum_every_steps: 1\n", "eval: {every_steps: 6, batch_size: 16}\n");
    absl::StatusOr<v1::JobSpec> more = ParseSpec(extra, "replicas");
    EXPECT_TRUE(more.ok()) << more.status();
    spec.set_workers(more->workers());
    spec.set_min_workers(more->min_workers());
    spec.set_replicas(more->replicas());
    spec.set_steps(more->steps());
    spec.set_checksum_every_steps(more->checksum_every_steps());
    *spec.mutable_eval() = more->eval();
    return spec;
  }

  ElasticRun RunOnCluster(const v1::JobSpec& spec) {
    absl::StatusOr<v1::Job> job = cluster_->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return {};
    return Follow(*cluster_, job->id());
  }

  // Submits `spec` and waits for it to end, FAILED expected: its failure reason.
  std::string FailureOf(const v1::JobSpec& spec) {
    absl::StatusOr<v1::Job> job = cluster_->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return job.status().ToString();
    absl::StatusOr<v1::Job> done = cluster_->WaitFor(job->id(), absl::Minutes(3));
    EXPECT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->state(), v1::FAILED) << cluster_->Logs();
    return done->failure_reason();
  }

  static LocalCluster* cluster_;
  static std::string* root_;
  static SafeTensors* golden_;
};

LocalCluster* Streamed::cluster_ = nullptr;
std::string* Streamed::root_ = nullptr;
SafeTensors* Streamed::golden_ = nullptr;

TEST_F(Streamed, TwoWorkersTrainFromShardsAsJaxPmapFedByTheReferencePreprocessing) {
  const v1::JobSpec spec = Spec(WriteShards("golden"));
  ASSERT_EQ(spec.workers(), 2u);
  ASSERT_OK_AND_ASSIGN(Model model, ModelFromSpec(spec.model()));
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster_->Submit(spec));
  std::vector<v1::StepEvent> steps;
  std::vector<v1::EvalResult> evals;
  ASSERT_OK_AND_ASSIGN(std::vector<v1::JobEvent> events, cluster_->Events(job.id()));
  for (const v1::JobEvent& e : events) {
    if (e.has_step()) steps.push_back(e.step());
    if (e.has_eval()) evals.push_back(e.eval());
  }
  ASSERT_OK_AND_ASSIGN(v1::Job done, cluster_->WaitFor(job.id(), absl::Minutes(3)));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << "\n" << cluster_->Logs();
  ASSERT_OK_AND_ASSIGN(Optimizer opt, OptimizerFromSpec(spec.optimizer()));
  ASSERT_OK_AND_ASSIGN(TrainState state, ReadCheckpoint(done.checkpoint_path(), model, opt));
  ExpectEveryTensorWithin(model, state.params, GoldenParams(*golden_, model, "train.params."),
                          1e-5);
  ASSERT_OK_AND_ASSIGN(std::vector<float> losses, golden_->F32("train.losses"));
  ASSERT_EQ(steps.size(), losses.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_NEAR(steps[i].loss(), losses[i], 1e-5 * std::fabs(losses[i])) << "step " << i;
  }
  ASSERT_FALSE(evals.empty());
  const float eval_loss = (*golden_->F32("eval.loss"))[0];
  EXPECT_NEAR(evals.back().test_loss(), eval_loss, 1e-5 * std::fabs(eval_loss));
  EXPECT_NEAR(evals.back().test_accuracy(), (*golden_->F32("eval.accuracy"))[0], 1e-6);
  EXPECT_EQ(evals.back().examples(), 16);
}

TEST_F(Streamed, AReplicasJobFromShardsEndsTheSameOnOneTwoThreeWorkersAndInOneProcess) {
  const std::string dir = WriteShards("replicas");
  std::map<int, ElasticRun> runs;
  for (int n : {1, 2, 3}) {
    runs[n] = RunOnCluster(ReplicasSpec(dir, std::to_string(n), 12));
    EXPECT_EQ(runs[n].workers, n);
    ASSERT_EQ(runs[n].losses.size(), 12u) << n << " workers";
    ASSERT_EQ(runs[n].evals.size(), 2u) << n << " workers: evaluations at step 6 and the end";
  }
  for (int n : {2, 3}) ExpectSameRun(runs[n], runs[1], absl::StrCat(n, " workers vs 1"));
  ExpectSameRun(RunLocally(ReplicasSpec(dir, "1", 12)), runs[1], "lockstep train vs 1 worker");

  // The preprocessing is on: without its random steps the bits differ.
  v1::JobSpec plain = ReplicasSpec(dir, "2", 12);
  plain.mutable_dataset()->clear_preprocess();
  plain.mutable_dataset()->add_preprocess()->mutable_center_crop()->set_size(12);
  EXPECT_NE(RunOnCluster(plain).checksum, runs[1].checksum);
}

TEST_F(Streamed, AWorkerKilledMidJobChangesNoBits) {
  constexpr int kSteps = 30;
  const v1::JobSpec spec = ReplicasSpec(WriteShards("killed"), "{min: 1, max: 3}", kSteps);
  const ElasticRun undisturbed = RunLocally(spec);
  ASSERT_EQ(undisturbed.losses.size(), static_cast<size_t>(kSteps));
  // A cluster of its own: the victim is not the suite's to lose.
  ClusterOptions options;
  options.workers = 3;
  const std::string roots = absl::StrCat("--data_root=", *root_, ",", kDefaultDataRoots);
  options.coordinator_flags = {roots};
  options.worker_flags = {roots};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(options));
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster->Submit(spec));
  ASSERT_OK(cluster->WaitForStep(job.id(), 8, absl::Minutes(3)));
  ASSERT_OK_AND_ASSIGN(int victim, cluster->WorkerOf(job.id()));
  cluster->KillWorker(victim);
  const ElasticRun got = Follow(*cluster, job.id());
  EXPECT_EQ(got.workers, 2);
  ExpectSameRun(got, undisturbed, "killed 1 of 3 workers vs undisturbed");
}

TEST_F(Streamed, ACorruptImageFailsTheJobNamingTheShardAndTheRecord) {
  // Record 20 (shard 1 of 3: records 16-31) with a byte of its PNG's pixel data flipped:
  // its chunk's CRC no longer matches.
  const std::string dir = WriteShards("corrupt", [](std::vector<ImageRecord>& records) {
    std::string& png = records[20].image;
    png[png.size() / 2] ^= 0x5a;
  });
  v1::JobSpec spec = Spec(dir);
  spec.set_steps(12);  // 2 epochs of 6 steps: every example is read
  EXPECT_THAT(FailureOf(spec), AllOf(HasSubstr("toy-train.tfrecord-00001-of-00003"),
                                     HasSubstr("record 4"), HasSubstr("PNG")));
}

TEST_F(Streamed, AMissingShardFailsTheJobNamingIt) {
  const std::string dir = WriteShards("missing");
  std::filesystem::remove(dir + "/toy-train.tfrecord-00002-of-00003");
  EXPECT_THAT(FailureOf(Spec(dir)), HasSubstr("toy-train.tfrecord-00002-of-00003"));
}

TEST_F(Streamed, ALabelPastTheModelsClassesFailsTheJobAtItsStart) {
  const std::string dir =
      WriteShards("label", [](std::vector<ImageRecord>& records) { records[33].label = 12; });
  EXPECT_THAT(FailureOf(Spec(dir)), AllOf(HasSubstr("toy-train.tfrecord-00002-of-00003"),
                                          HasSubstr("label 12 is not in [0, 10)")));
}

}  // namespace
}  // namespace lockstep::testing
