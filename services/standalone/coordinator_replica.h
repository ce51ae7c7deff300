// CoordinatorReplica: the coordinator's own replica for the replay audit (LocalReplica,
// docs/audit.md): a JobSlot on the CPU in the coordinator's process, reached through an
// in-process WorkerClient, lent to one replay at a time. Each loan builds a CPU backend
// computing with the job's threads; the datasets are read from the same data roots as the
// workers' (--data_root) and kept loaded for the next replay (one dataset at a time).
//
// Thread-safe.
#ifndef LOCKSTEP_SERVICES_STANDALONE_COORDINATOR_REPLICA_H_
#define LOCKSTEP_SERVICES_STANDALONE_COORDINATOR_REPLICA_H_

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "core/data/data_roots.h"
#include "services/coordinator/jobs/local_replica.h"
#include "workers/dataset_cache.h"

namespace lockstep {

class CoordinatorReplica final : public LocalReplica {
 public:
  // `roots`: where datasets are read from (the workers' data roots); `index_cache_dir`:
  // where a streamed dataset's indexes go when they cannot be written beside its files
  // (empty: none); `max_threads` (>= 1): the most threads a replay may compute with;
  // `max_bytes`: the most memory a replay may take (its state, activations and dataset,
  // estimated as for a worker: core/spec/memory.h).
  CoordinatorReplica(DataRoots roots, std::string index_cache_dir, int max_threads,
                     uint64_t max_bytes);
  ~CoordinatorReplica() override;  // every client it lent must be gone

  absl::StatusOr<std::unique_ptr<WorkerClient>> Lend(const v1::JobSpec& spec, int threads) override;

 private:
  class Lent;
  // FAILED_PRECONDITION naming the field, the path and the error when a path of `dataset`
  // is outside the roots or cannot be read here; without loading anything.
  absl::Status CheckReadable(const v1::DatasetSpec& dataset) const;
  void Return();

  const DataRoots roots_;
  const int max_threads_;
  const uint64_t max_bytes_;
  DatasetCache datasets_;
  absl::Mutex mu_;
  bool lent_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_STANDALONE_COORDINATOR_REPLICA_H_
