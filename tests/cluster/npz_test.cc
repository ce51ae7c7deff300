// NPZ datasets on a real cluster: two worker processes read Fashion-MNIST from .npz files
// under their --data_root (np.savez's STORED training split, np.savez_compressed's
// DEFLATED test split) and train bit for bit as the same job reading the IDX files: the
// same loss every step, the same evaluations and the same parameter checksum.
#include <unistd.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/dataset.h"
#include "core/data/npz_testing.h"
#include "core/testing.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  v1::Job job;
  std::vector<float> losses;
  std::vector<double> test_losses;
  std::vector<double> test_accuracies;
};

Outcome Train(LocalCluster& cluster, const v1::JobSpec& spec) {
  Outcome run;
  auto job = cluster.Submit(spec);
  EXPECT_OK(job);
  if (!job.ok()) return run;
  auto events = cluster.Events(job->id());  // live, from submission to the end
  EXPECT_OK(events);
  for (const v1::JobEvent& e : events.value_or(std::vector<v1::JobEvent>())) {
    if (e.has_step()) run.losses.push_back(e.step().loss());
    if (e.has_eval()) {
      run.test_losses.push_back(e.eval().test_loss());
      run.test_accuracies.push_back(e.eval().test_accuracy());
    }
  }
  auto done = cluster.WaitFor(job->id(), absl::Minutes(2));
  EXPECT_OK(done);
  if (!done.ok()) return run;
  run.job = *done;
  EXPECT_EQ(done->state(), v1::SUCCEEDED) << done->failure_reason() << "\n" << cluster.Logs();
  return run;
}

TEST(NpzCluster, TwoWorkersTrainFromNpzFilesBitForBitAsFromIdx) {
  // A data root of the test's own: the workers and the coordinator accept it besides the
  // default roots (which hold the IDX files).
  const std::string root =
      (fs::temp_directory_path() / absl::StrCat("lockstep-npz-", getpid())).string();
  fs::create_directories(root);
  for (const auto& [split, compressed] : {std::pair("train", false), std::pair("t10k", true)}) {
    ASSERT_OK(WriteIdxAsNpz(absl::StrCat(kDefaultDatasetPath, "/", split),
                            absl::StrCat(root, "/", split, ".npz"), compressed));
  }
  const std::string roots = absl::StrCat("--data_root=", root, ",", kDefaultDataRoots);
  ClusterOptions options;
  options.workers = 2;
  options.coordinator_flags = {roots};
  options.worker_flags = {roots};
  auto cluster = LocalCluster::Start(options);
  ASSERT_OK(cluster);

  v1::JobSpec idx = MlpSpec(/*workers=*/2, /*steps=*/30, /*dropout_rate=*/0.1, /*batch=*/64);
  idx.mutable_eval()->set_every_steps(15);
  idx.mutable_eval()->set_batch_size(1000);
  v1::JobSpec npz = idx;
  v1::DatasetSpec* d = npz.mutable_dataset();
  d->set_format("npz");
  d->set_train_path(root + "/train.npz");
  d->set_test_path(root + "/t10k.npz");

  const Outcome from_idx = Train(**cluster, idx);
  const Outcome from_npz = Train(**cluster, npz);
  ASSERT_EQ(from_npz.losses.size(), 30u);
  EXPECT_EQ(from_npz.losses, from_idx.losses);
  ASSERT_EQ(from_npz.test_losses.size(), 2u);
  EXPECT_EQ(from_npz.test_losses, from_idx.test_losses);
  EXPECT_EQ(from_npz.test_accuracies, from_idx.test_accuracies);
  EXPECT_NE(from_npz.job.param_checksum(), 0u);
  EXPECT_EQ(from_npz.job.param_checksum(), from_idx.job.param_checksum());

  // A path outside every data root is refused at submission, naming the field.
  v1::JobSpec outside = npz;
  outside.mutable_dataset()->set_train_path("/etc/train.npz");
  auto refused = (*cluster)->Submit(outside);
  EXPECT_THAT(refused.status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr(
                           "dataset.train_path: \"/etc/train.npz\" is outside the data roots")));
  // The workers read the files themselves: one missing inside the root fails the job,
  // naming it.
  v1::JobSpec missing = npz;
  missing.mutable_dataset()->set_train_path(root + "/missing.npz");
  auto job = (*cluster)->Submit(missing);
  ASSERT_OK(job);
  auto failed = (*cluster)->WaitFor(job->id(), absl::Minutes(1));
  ASSERT_OK(failed);
  EXPECT_EQ(failed->state(), v1::FAILED);
  EXPECT_THAT(failed->failure_reason(), ::testing::HasSubstr("missing.npz"));
  fs::remove_all(root);
}

}  // namespace
}  // namespace lockstep::testing
