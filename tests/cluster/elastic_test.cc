// Elastic and exact (docs/elastic.md), across real processes: one `replicas: 4` job (a
// BatchNorm convnet with dropout) run on 1, 2, 3 and 4 workers, and started with a range
// of workers {min 1, max 4}, ends with one param_checksum and bitwise the same losses and
// evaluations on all of them, and the same as `lockstep train`'s job loop (one process
// holding the 4 logical replicas).
#include "tests/cluster/elastic_testing.h"

namespace lockstep::testing {
namespace {

class Elastic : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto c = LocalCluster::Start(4);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() { delete cluster_; }

  ElasticRun RunOnCluster(const v1::JobSpec& spec) {
    absl::StatusOr<v1::Job> job = cluster_->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return {};
    return Follow(*cluster_, job->id());
  }

  static LocalCluster* cluster_;
};

LocalCluster* Elastic::cluster_ = nullptr;

TEST_F(Elastic, AReplicasJobEndsTheSameOnOneTwoThreeAndFourWorkersAndInOneProcess) {
  std::map<int, ElasticRun> runs;
  for (int n : {1, 2, 3, 4}) {
    runs[n] = RunOnCluster(ElasticSpec(std::to_string(n), 12));
    EXPECT_EQ(runs[n].workers, n);
    ASSERT_EQ(runs[n].losses.size(), 12u) << n << " workers";
    ASSERT_EQ(runs[n].replicas[1].size(), 4u) << n << " workers: the V losses";
    ASSERT_EQ(runs[n].evals.size(), 2u) << n << " workers: evaluations at step 6 and the end";
  }
  for (int n : {2, 3, 4}) ExpectSameRun(runs[n], runs[1], absl::StrCat(n, " workers vs 1"));

  const ElasticRun single = RunLocally(ElasticSpec("1", 12));
  ExpectSameRun(single, runs[1], "lockstep train vs 1 worker");

  // A range: it starts on as many free workers as there are, up to its most.
  const ElasticRun ranged = RunOnCluster(ElasticSpec("{min: 1, max: 4}", 12));
  EXPECT_EQ(ranged.workers, 4);
  ExpectSameRun(ranged, runs[1], "workers {min 1, max 4} vs 1 worker");
}

}  // namespace
}  // namespace lockstep::testing
