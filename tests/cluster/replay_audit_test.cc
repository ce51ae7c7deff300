// The replay audit across real processes (docs/audit.md, "The replay audit"): a one-worker
// job on a one-worker cluster has no free worker to replay it. The coordinator's own
// replica replays it (--audit_local_replica, on by default), reading the dataset from its
// --data_root; turned off, the replay is skipped. The job's events say which, and the
// params are the same either way.
#include <set>

#include "absl/strings/match.h"
#include "core/testing.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

v1::JobSpec OneWorker() {
  v1::JobSpec spec;
  spec.mutable_model()->set_kind("mlp");
  spec.mutable_model()->add_hidden(32);
  spec.mutable_optimizer()->set_kind("adam");
  spec.mutable_optimizer()->set_learning_rate(1e-3);
  spec.set_global_batch_size(32);
  spec.set_steps(10);
  spec.set_workers(1);
  spec.mutable_recovery()->set_snapshot_every_steps(5);
  return spec;
}

TEST(ReplayAuditCluster, TheCoordinatorsReplicaReplaysAOneWorkerJobUnlessTurnedOff) {
  std::set<uint64_t> checksums;
  for (const bool on : {true, false}) {
    std::vector<std::string> flags;
    if (!on) flags.push_back("--audit_local_replica=false");
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> c, LocalCluster::Start(1, flags));
    ASSERT_OK_AND_ASSIGN(v1::Job job, c->Submit(OneWorker()));
    std::set<std::string> said;  // the watch may replay the history: each reason once
    ASSERT_OK_AND_ASSIGN(v1::Job done,
                         c->WatchUntil(job.id(), absl::Minutes(2), [&](const v1::JobEvent& e) {
                           if (e.has_state() && absl::StrContains(e.state().reason(), "replay")) {
                             said.insert(e.state().reason());
                           }
                           return false;
                         }));
    ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << "\n" << c->Logs();
    checksums.insert(done.param_checksum());
    ASSERT_EQ(said.size(), 2u) << c->Logs();
    for (const std::string& r : said) {
      EXPECT_THAT(r, HasSubstr(on ? ": passed: the coordinator's replica replayed steps "
                                  : ": skipped: no free worker of equal threads"));
    }
    if (on) {
      EXPECT_THAT(*said.begin(),
                  HasSubstr("replay audit of step 10: passed: the coordinator's replica replayed "
                            "steps 6 to 10 alone from the state of step 5"));
    }
  }
  EXPECT_EQ(checksums.size(), 1u);
}

}  // namespace
}  // namespace lockstep::testing
