// Helpers for the elastic tests (elastic_test.cc, elastic_resize_test.cc): the
// `replicas: 4` BatchNorm convnet with dropout they run, what a run reported, and the same
// spec trained by `lockstep train`'s job loop (one in-process worker, 4 logical replicas).
#ifndef LOCKSTEP_TESTS_CLUSTER_ELASTIC_TESTING_H_
#define LOCKSTEP_TESTS_CLUSTER_ELASTIC_TESTING_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/spec/spec.h"
#include "core/testing.h"
#include "services/standalone/local_job.h"
#include "tests/cluster/elastic_spec.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {

// `steps` steps of 16 rows on 4 logical replicas, an evaluation every 6 steps.
inline v1::JobSpec ElasticSpec(const std::string& workers, int steps) {
  const std::string text = absl::StrCat(
      kElasticSpecYaml, "checksum_every_steps: 1\neval: {every_steps: 6, batch_size: 500}\n",
      "steps: ", steps, "\nworkers: ", workers, "\n");
  absl::StatusOr<v1::JobSpec> spec = ParseSpec(text, "elastic spec");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(v1::JobSpec());
}

// What a run reported, by step (a step reported again overwrites: the last one counts).
struct ElasticRun {
  uint64_t checksum = 0;
  std::map<int64_t, float> losses;
  std::map<int64_t, std::vector<float>> replicas;  // the V replica losses
  std::map<int64_t, std::vector<double>> evals;    // by step: test_loss, test_accuracy
  int replayed = 0;                                // steps reported as replays
  std::vector<std::string> reasons;                // the state events' reasons
  int workers = 0;                                 // ranks it ended on
  int64_t resized_ms = 0;                          // unix ms of the first "resized" event
  int64_t next_step_ms = 0;                        // and of the first step after it
};

inline void Record(const v1::StepEvent& s, ElasticRun* run) {
  run->losses[s.step()] = s.loss();
  run->replicas[s.step()].assign(s.local_losses().begin(), s.local_losses().end());
  if (s.replay()) ++run->replayed;
}
inline void Record(const v1::EvalResult& e, ElasticRun* run) {
  run->evals[e.step()] = {e.test_loss(), e.test_accuracy()};
}
inline void Record(const v1::JobEvent& e, ElasticRun* run) {
  if (e.has_step()) Record(e.step(), run);
  if (e.has_eval()) Record(e.eval(), run);
  if (e.has_state()) run->reasons.push_back(e.state().reason());
  if (e.has_state() && run->resized_ms == 0 && e.state().reason().find("resized") == 0) {
    run->resized_ms = e.unix_ms();
  }
  if (e.has_step() && run->resized_ms > 0 && run->next_step_ms == 0) {
    run->next_step_ms = e.unix_ms();
  }
}

class ElasticSink final : public JobSink {
 public:
  explicit ElasticSink(ElasticRun* run) : run_(run) {}
  void OnRunning(int64_t) override {}
  void OnStep(const v1::StepEvent& e) override { Record(e, run_); }
  void OnEval(const v1::EvalResult& e) override { Record(e, run_); }

 private:
  ElasticRun* run_;
};

// `spec` trained in this process on one worker holding every replica.
inline ElasticRun RunLocally(v1::JobSpec spec) {
  ElasticRun run;
  spec.set_workers(1);
  spec.clear_min_workers();
  absl::StatusOr<v1::JobSpec> valid = Validate(spec, {.files_in_checkpoint_dir = false});
  EXPECT_TRUE(valid.ok()) << valid.status();
  if (!valid.ok()) return run;
  ElasticSink sink(&run);
  absl::StatusOr<JobOutcome> outcome = RunLocalJob(*valid, &sink);
  EXPECT_TRUE(outcome.ok()) << outcome.status();
  if (outcome.ok()) run.checksum = outcome->param_checksum;
  return run;
}

// The job's events until it ends, and its end (SUCCEEDED expected).
inline ElasticRun Follow(LocalCluster& cluster, const std::string& id) {
  ElasticRun run;
  absl::StatusOr<std::vector<v1::JobEvent>> events = cluster.Events(id);
  EXPECT_TRUE(events.ok()) << events.status();
  for (const v1::JobEvent& e : events.value_or(std::vector<v1::JobEvent>())) Record(e, &run);
  absl::StatusOr<v1::Job> done = cluster.WaitFor(id, absl::Minutes(5));
  EXPECT_TRUE(done.ok()) << done.status();
  if (!done.ok()) return run;
  EXPECT_EQ(done->state(), v1::SUCCEEDED) << done->failure_reason() << "\n" << cluster.Logs();
  run.checksum = done->param_checksum();
  run.workers = done->workers_size();
  return run;
}

inline void ExpectSameRun(const ElasticRun& got, const ElasticRun& want, const std::string& what) {
  EXPECT_NE(want.checksum, 0u) << what;
  EXPECT_EQ(got.checksum, want.checksum) << what;
  EXPECT_EQ(got.losses, want.losses) << what;  // bitwise: floats compared with ==
  EXPECT_EQ(got.replicas, want.replicas) << what;
  EXPECT_EQ(got.evals, want.evals) << what;
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_TESTS_CLUSTER_ELASTIC_TESTING_H_
