// The fixture the JobManager tests share (job_manager_*_test.cc): a manager over fake
// workers (fake_worker_client.h) with its records in a folder of its own, a small spec,
// and waits on a job's events that fail the test, never sleep.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_JOB_MANAGER_TEST_H_
#define LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_JOB_MANAGER_TEST_H_

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/spec/spec.h"
#include "core/testing.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_testing.h"
#include "services/coordinator/workers/fake_worker_client.h"

namespace lockstep::testing {

inline constexpr absl::Duration kPatience = absl::Seconds(30);  // for what should take a second

// An MLP job of 6 steps on `workers` workers, an eval every 3. No audit: the fakes compute
// no gradients to recompute (standalone/audit_test.cc audits real replicas).
inline v1::JobSpec Spec(int workers, const std::string& request_id = "") {
  auto spec = ParseSpec(absl::StrCat("model: {kind: mlp, hidden: [8]}\n"
                                     "optimizer: {kind: sgd, learning_rate: 0.1}\n"
                                     "global_batch_size: 8\nsteps: 6\neval: {every_steps: 3}\n"
                                     "audit: {every_steps: 0}\nworkers: ",
                                     workers),
                        "test spec");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->set_request_id(request_id);
  return *spec;
}

inline std::vector<std::string> Ids(const v1::ListJobsResponse& resp) {
  std::vector<std::string> ids;
  for (const v1::Job& j : resp.jobs()) ids.push_back(j.id());
  return ids;
}

class JobManagerTest : public ::testing::Test {
 protected:
  JobManagerTest() {
    std::string templ = "/tmp/job_manager_test.XXXXXX";
    EXPECT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    options_.records_dir = dir_ + "/jobs";
  }
  ~JobManagerTest() override {
    jobs_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // (Re)starts the manager: a new one over the same pool and records, as after a restart.
  absl::Status Start(std::vector<FakeWorker> fakes = {}) {
    jobs_.reset();
    factory_ = std::make_unique<FakeClientFactory>(std::move(fakes));
    registry_ = std::make_shared<prometheus::Registry>();  // a restarted process's
    metrics_ = std::make_unique<CoordinatorMetrics>(registry_);
    jobs_ = std::make_unique<JobManager>(options_, pool_.get(), kv_.get(), factory_.get(),
                                         metrics_.get());
    return jobs_->Start();
  }
  // Workers at "fake:<first>".. (FakeClientFactory connects its i-th Connect to rank i).
  void Register(int n, int first = 0) {
    for (int i = first; i < first + n; ++i) {
      pool_->Register(absl::StrCat("fake:", i), "cpu", absl::StrCat("fake-", i), 1);
    }
  }
  std::vector<bool> Free() {
    std::vector<bool> free;
    for (const WorkerView& v : pool_->Views()) free.push_back(v.free);
    return free;
  }
  // The job records (one JSON file each; next_id beside them is not one).
  std::vector<std::string> RecordFiles() {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(options_.records_dir)) {
      if (e.path().extension() == ".json") names.push_back(e.path().filename());
    }
    return names;
  }

  std::string dir_;
  SimulatedClock rate_clock_;  // the submit rate's (options_.clock when a test sets it)
  CoordinatorOptions options_;
  SimulatedClock clock_;  // the pool's: heartbeats lapse when a test advances it
  std::unique_ptr<WorkerPool> pool_ = std::make_unique<WorkerPool>(absl::Hours(1), "", &clock_);
  std::unique_ptr<KvTable> kv_;  // none unless a test makes one
  std::unique_ptr<FakeClientFactory> factory_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<CoordinatorMetrics> metrics_;  // outlives jobs_
  std::unique_ptr<JobManager> jobs_;
  // The job once its event log closes: an empty one, and a test failure, if it does not
  // end within kPatience. `states` gets the state events seen.
  v1::Job AwaitEnd(const std::string& id, std::vector<v1::JobState>* states = nullptr) {
    std::vector<v1::JobEvent> events;
    absl::StatusOr<v1::Job> job = lockstep::testing::AwaitEnd(*jobs_, id, kPatience, &events);
    for (const v1::JobEvent& e : events) {
      if (e.has_state() && states != nullptr) states->push_back(e.state().state());
    }
    if (!job.ok()) ADD_FAILURE() << job.status();
    return job.value_or(v1::Job());
  }
  // The job once its event log shows `state`: an empty one, and a test failure, if it
  // does not come.
  v1::Job AwaitState(const std::string& id, v1::JobState state) {
    absl::StatusOr<v1::Job> job = lockstep::testing::AwaitState(*jobs_, id, state, kPatience);
    if (!job.ok()) ADD_FAILURE() << job.status();
    return job.value_or(v1::Job());
  }
  // The value of a metric of the manager's (CoordinatorMetrics), -1 if it has none.
  double Metric(const std::string& name, const prometheus::Labels& labels = {}) {
    return ReadMetric(metrics_->collectables(), name, labels).value_or(-1);
  }
};

}  // namespace lockstep::testing

#endif  // LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_JOB_MANAGER_TEST_H_
