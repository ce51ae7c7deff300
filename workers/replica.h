// Replica: a worker's side of a job, without gRPC. It holds the job's TrainState on the
// backend, the datasets (loaded once per path and kept for later jobs, a few) and the
// collective, and executes the coordinator's commands: Prepare, Step, Evaluate,
// FetchState, Release. One job at a time. Thread-safe: commands are serialized; Release
// never waits behind a running step (it marks the job released and the step's end tears
// it down).
#ifndef LOCKSTEP_WORKERS_REPLICA_H_
#define LOCKSTEP_WORKERS_REPLICA_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/backend.h"
#include "core/collective.h"
#include "core/step.h"
#include "lockstep/v1/worker.pb.h"

namespace lockstep {

// Builds the data plane for a job: a Gloo (CPU) or NCCL (CUDA) collective bootstrapped
// through the coordinator's rendezvous under `prefix`.
class CollectiveFactory {
 public:
  virtual ~CollectiveFactory() = default;
  virtual absl::StatusOr<std::unique_ptr<Collective>> Create(int rank, int size,
                                                             const std::string& prefix,
                                                             absl::Duration timeout,
                                                             Backend* backend) = 0;
};

class Replica {
 public:
  // `backend` and `collectives` must outlive the replica.
  Replica(Backend* backend, CollectiveFactory* collectives);
  ~Replica();

  // `state` holds params then optimizer slots as float32 bytes. Loads the dataset named
  // by the spec (FAILED_PRECONDITION naming the path if missing) and joins the collective.
  // A job still held is dropped: the coordinator decides what runs where.
  absl::StatusOr<v1::PrepareResponse> Prepare(const v1::PrepareHeader& header,
                                              const std::string& state);
  // Steps must come in order: ABORTED if `step` is not the replica's next one.
  absl::StatusOr<v1::StepResponse> Step(const v1::StepRequest& request);
  absl::StatusOr<v1::EvaluateResponse> Evaluate(const v1::EvaluateRequest& request);
  absl::StatusOr<TrainState> FetchState(const std::string& job_id);
  // Idempotent; unknown job ids are fine (the job may never have been prepared here).
  absl::Status Release(const std::string& job_id);

  // Not OK once the backend is unusable for good (CUDA errors are sticky, e.g. after a
  // collective was aborted mid-kernel): the worker should exit and be replaced.
  // Thread-safe.
  absl::Status device_error();

 private:
  struct Job;
  struct Data {
    Dataset train, test;
    DeviceDataset train_d, test_d;
    uint64_t last_use = 0;
  };
  // Datasets kept for later jobs, the least recently used dropped first.
  static constexpr size_t kMaxDatasets = 2;
  absl::StatusOr<Data*> LoadData(const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Job*> Current(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropIfReleased() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a failed command: records the backend's error if it no longer works.
  void CheckDevice() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Backend* backend_;
  CollectiveFactory* collectives_;
  absl::Mutex mu_;  // serializes commands
  std::unique_ptr<Job> job_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Data>> data_ ABSL_GUARDED_BY(mu_);
  uint64_t data_uses_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex release_mu_;
  std::string released_ ABSL_GUARDED_BY(release_mu_);  // job id released while busy
  absl::Mutex device_mu_;
  absl::Status device_error_ ABSL_GUARDED_BY(device_mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_REPLICA_H_
