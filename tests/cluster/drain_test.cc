// A coordinator stopped gracefully (SIGTERM, what Kubernetes sends on every rollout and
// node drain): its running job snapshots and is recorded to continue, a queued job is not
// started, open watch streams end at once saying why, and the process exits within its
// grace period, also while a job waits for workers (RECOVERING). The restarted coordinator
// ends the job with the undisturbed run's params, bit for bit. (SIGKILL restarts:
// cluster_test, chaos_test, torn_writes_test.)
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/testing.h"
#include "services/common/rpc/status.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kGrace = absl::Seconds(20);  // the coordinator's default

// A WatchJob stream read to its end on a thread of its own: how it ended, and when.
class OpenWatch {
 public:
  OpenWatch(LocalCluster& c, const std::string& id) {
    thread_ = std::thread([this, &c, id] {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(5)));
      v1::WatchJobRequest req;
      req.set_id(id);
      auto reader = c.jobs().WatchJob(&ctx, req);
      v1::JobEvent e;
      while (reader->Read(&e)) {
      }
      status_ = FromGrpcStatus(reader->Finish());
      ended_ = absl::Now();
    });
  }
  // Joins the reader (it ends with the stream).
  absl::Status Join() {
    thread_.join();
    return status_;
  }
  absl::Time ended() const { return ended_; }

 private:
  std::thread thread_;
  absl::Status status_;
  absl::Time ended_;
};

v1::JobSpec LongSpec() {
  v1::JobSpec spec = MlpSpec(2, 600);
  // No snapshot but the drain's: the restarted coordinator continues from the one it took.
  spec.mutable_recovery()->set_snapshot_every_steps(1000000);
  spec.mutable_recovery()->set_snapshot_every_seconds(100000);
  return spec;
}

TEST(Drain, SigtermSnapshotsTheRunningJobStartsNoQueuedOneAndARestartEndsItBitForBit) {
  auto c = LocalCluster::Start(2);
  ASSERT_OK(c.status());
  LocalCluster& cluster = **c;
  ASSERT_OK_AND_ASSIGN(v1::Job clean, cluster.Submit(LongSpec()));
  ASSERT_OK_AND_ASSIGN(v1::Job clean_done, cluster.WaitFor(clean.id(), absl::Minutes(3)));
  ASSERT_EQ(clean_done.state(), v1::SUCCEEDED) << clean_done.failure_reason();

  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster.Submit(LongSpec()));
  ASSERT_OK(cluster.WaitForStep(job.id(), 100, absl::Minutes(2)).status());
  ASSERT_OK_AND_ASSIGN(v1::Job queued, cluster.Submit(MlpSpec(2, 20)));
  ASSERT_EQ(queued.state(), v1::QUEUED);  // both workers are busy
  OpenWatch watch(cluster, job.id());
  OpenWatch queued_watch(cluster, queued.id());
  ASSERT_OK(cluster.WaitForStep(job.id(), 120, absl::Minutes(2)).status());  // watches open

  const absl::Time signalled = absl::Now();
  ASSERT_OK_AND_ASSIGN(const absl::Duration took,
                       cluster.DrainAndRestartCoordinator(kGrace + absl::Seconds(5)));
  std::printf("drain (SIGTERM -> exit) with a running job and 2 open watches: %.0f ms\n",
              absl::ToDoubleMilliseconds(took));
  EXPECT_LT(took, kGrace);
  // The watches ended with the drain, saying why, not when the process went.
  EXPECT_THAT(watch.Join(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("the coordinator is stopping")));
  EXPECT_THAT(queued_watch.Join(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("watch")));
  EXPECT_LE(watch.ended(), signalled + took);

  ASSERT_OK_AND_ASSIGN(v1::Job done, cluster.WaitFor(job.id(), absl::Minutes(3)));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();  // CANCELLED at 400deec
  EXPECT_EQ(done.param_checksum(), clean_done.param_checksum());
  EXPECT_EQ(done.recoveries(), 1);
  ASSERT_OK_AND_ASSIGN(v1::Job queued_done, cluster.WaitFor(queued.id(), absl::Minutes(2)));
  EXPECT_EQ(queued_done.state(), v1::SUCCEEDED) << queued_done.failure_reason();
  // Started by the restarted coordinator, not during the drain.
  EXPECT_GE(queued_done.started_unix_ms(), absl::ToUnixMillis(signalled + took));
}

TEST(Drain, SigtermWhileAJobWaitsForWorkersExitsAtOnceAndTheJobContinuesLater) {
  auto c = LocalCluster::Start(2);
  ASSERT_OK(c.status());
  LocalCluster& cluster = **c;
  ASSERT_OK_AND_ASSIGN(v1::Job clean, cluster.Submit(MlpSpec(2, 200)));
  ASSERT_OK_AND_ASSIGN(v1::Job clean_done, cluster.WaitFor(clean.id(), absl::Minutes(3)));
  ASSERT_EQ(clean_done.state(), v1::SUCCEEDED) << clean_done.failure_reason();

  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster.Submit(MlpSpec(2, 200)));
  ASSERT_OK(cluster.WaitForStep(job.id(), 20, absl::Minutes(2)).status());
  cluster.KillWorker(0);
  cluster.KillWorker(1);  // none left: it waits up to recovery_timeout_seconds (300)
  ASSERT_OK_AND_ASSIGN(v1::Job recovering,
                       cluster.WaitFor(job.id(), absl::Minutes(1), v1::RECOVERING));
  ASSERT_EQ(recovering.state(), v1::RECOVERING);
  ASSERT_OK_AND_ASSIGN(const absl::Duration took,
                       cluster.DrainAndRestartCoordinator(kGrace + absl::Seconds(5)));
  std::printf("drain (SIGTERM -> exit) with a job RECOVERING: %.0f ms\n",
              absl::ToDoubleMilliseconds(took));
  EXPECT_LT(took, absl::Seconds(5));  // 305 s at 400deec (with a watch open)
  ASSERT_OK_AND_ASSIGN(v1::Job kept, cluster.Get(job.id()));
  EXPECT_EQ(kept.state(), v1::RECOVERING);  // waiting for workers again, not CANCELLED
  ASSERT_OK(cluster.AddWorker().status());
  ASSERT_OK(cluster.AddWorker().status());
  ASSERT_OK_AND_ASSIGN(v1::Job done, cluster.WaitFor(job.id(), absl::Minutes(3)));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_EQ(done.param_checksum(), clean_done.param_checksum());
}

}  // namespace
}  // namespace lockstep::testing
