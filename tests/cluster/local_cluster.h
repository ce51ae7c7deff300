// LocalCluster: a coordinator and N workers started as separate processes on loopback
// for integration tests (ClusterProcesses, as `lockstep cluster up` starts them), with
// helpers to submit specs, wait for jobs and kill workers.
#ifndef LOCKSTEP_TESTS_CLUSTER_LOCAL_CLUSTER_H_
#define LOCKSTEP_TESTS_CLUSTER_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "clients/cluster/cluster_processes.h"
#include "lockstep/v1/job.grpc.pb.h"

namespace lockstep::testing {

class LocalCluster {
 public:
  // Starts the coordinator (with extra flags) and `workers` workers, and waits until all
  // have registered.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(
      int workers, std::vector<std::string> coordinator_flags = {}, int threads_per_worker = 1);
  // The same with every option (dir and binaries are filled in): e.g. users, insecure.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(ClusterOptions options);
  ~LocalCluster();  // kills everything

  const std::string& address() const { return processes_->address(); }
  const std::string& dir() const { return dir_; }
  v1::JobService::Stub& jobs() { return *stub_; }  // as the admin
  const ClusterProcesses& processes() const { return *processes_; }

  absl::StatusOr<std::string> AddWorker() { return processes_->AddWorker(); }
  // SIGKILLs the coordinator and starts it again on the same port and state directory.
  absl::Status RestartCoordinator() { return processes_->RestartCoordinator(); }
  // SIGTERM (a drain), then a restart: the time from the signal to the exit.
  absl::StatusOr<absl::Duration> DrainAndRestartCoordinator(absl::Duration limit) {
    return processes_->DrainAndRestartCoordinator(limit);
  }
  // SIGKILLs worker i (in start order).
  void KillWorker(int i) { processes_->KillWorker(i); }
  void SignalWorker(int i, int signal) { processes_->SignalWorker(i, signal); }
  // Worker i's exit status once it exited (ClusterProcesses::WaitForWorkerExit).
  absl::StatusOr<int> WaitForWorkerExit(int i, absl::Duration limit) {
    return processes_->WaitForWorkerExit(i, limit);
  }

  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec);
  absl::StatusOr<v1::Job> Get(const std::string& id);
  absl::StatusOr<v1::Job> Cancel(const std::string& id);
  // Streams the job's events until done(event) or the job's end; then the job as it is.
  absl::StatusOr<v1::Job> WatchUntil(const std::string& id, absl::Duration timeout,
                                     const std::function<bool(const v1::JobEvent&)>& done);
  // Watches the job until it reaches a terminal state, or `state` if given.
  absl::StatusOr<v1::Job> WaitFor(const std::string& id, absl::Duration timeout,
                                  v1::JobState state = v1::JOB_STATE_UNSPECIFIED);
  // Watches the job until it has reached `step` (job.step() >= step); DEADLINE_EXCEEDED
  // after `timeout`, FAILED_PRECONDITION if the job ends first.
  absl::StatusOr<v1::Job> WaitForStep(const std::string& id, int64_t step, absl::Duration timeout);
  // Every event WatchJob streams for the job until it ends (history, then live).
  absl::StatusOr<std::vector<v1::JobEvent>> Events(const std::string& id);
  absl::StatusOr<v1::ListWorkersResponse> Workers();
  // The start-order index (for KillWorker, SignalWorker) of the job's rank-0 worker.
  absl::StatusOr<int> WorkerOf(const std::string& job_id);
  // Reads the worker logs and the coordinator log (for failure messages).
  std::string Logs() const;

 private:
  LocalCluster() = default;

  std::string dir_;
  std::unique_ptr<ClusterProcesses> processes_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

// A small MLP job spec (Fashion-MNIST from the Debian package).
v1::JobSpec MlpSpec(int workers, int steps, double dropout_rate = 0.0, int batch = 64);

// The binaries under test: in $LOCKSTEP_BIN_DIR when set (e.g. another build, for a
// comparison), else in this build tree's services/.
std::string BinaryPath(const std::string& name);

}  // namespace lockstep::testing

#endif  // LOCKSTEP_TESTS_CLUSTER_LOCAL_CLUSTER_H_
