// A job's memory, estimated from its spec before it runs, so that a job too big for the
// coordinator or its workers is refused at submit (RESOURCE_EXHAUSTED naming the field
// that weighs most) instead of getting a process killed mid-run.
//
// The figures count what the code holds, copy for copy (see memory.cc); they are upper
// bounds, measured against real processes' peak RSS in deploy/CONFIGURATION.md.
#ifndef LOCKSTEP_CORE_SPEC_MEMORY_H_
#define LOCKSTEP_CORE_SPEC_MEMORY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

// The defaults fit the Kubernetes manifests (deploy/k8s/base): of a coordinator's 1.5 GiB,
// 512 MiB is the replay audit's replica's and of the 1 GiB left a quarter is kept for
// itself and its other jobs' bookkeeping; a worker limited to
// 4 GiB keeps an eighth of headroom.
inline constexpr int64_t kDefaultJobMemoryBudgetMb = 768;
inline constexpr int64_t kDefaultWorkerMemoryBudgetMb = 3584;

struct MemoryEstimate {
  uint64_t train_state = 0;  // one TrainState: params, optimizer slots, batch_stats
  // The coordinator's memory for this job (its own process not included): the
  // TrainState as it holds it, up to three copies while it saves one.
  uint64_t coordinator = 0;
  uint64_t coordinator_per_worker = 0;  // of which each worker's stream and connection
  // Each worker's whole process, in host memory, by part (a cuda job's state and
  // activations are in device memory: not counted).
  uint64_t worker_state = 0;        // params, gradients, optimizer state, checksum copy,
                                    // all-reduce scratch
  uint64_t worker_activations = 0;  // the training step's buffers for the local batch
  uint64_t worker_eval = 0;         // the evaluation's buffers for an eval batch
  uint64_t worker_dataset = 0;      // the dataset as floats (DatasetSize)
  uint64_t worker_process = 0;      // the process itself (libraries, threads, gRPC)
  uint64_t worker() const {
    return worker_state + worker_activations + worker_eval + worker_dataset + worker_process;
  }
};

// How many examples the job's splits hold. The coordinator cannot see the workers'
// files: at submit it assumes an MNIST-sized dataset (60,000 and 10,000 images of the
// model's input shape), and checks again with the sizes the workers report once they
// have loaded it (JobRunner).
struct DatasetSize {
  int64_t train = 60000, test = 10000;
};

// `spec` is validated (Validate); a spec whose model cannot be built estimates as 0.
MemoryEstimate EstimateMemory(const v1::JobSpec& spec, DatasetSize data = {});

// Budgets in bytes; 0: none.
struct MemoryBudget {
  uint64_t coordinator_per_job = uint64_t{kDefaultJobMemoryBudgetMb} << 20;
  uint64_t worker = uint64_t{kDefaultWorkerMemoryBudgetMb} << 20;
};

// RESOURCE_EXHAUSTED when the estimate exceeds a budget, naming the field that weighs
// most (model.hidden, global_batch_size, eval.batch_size, dataset.train_path...), the
// estimate, its parts and the budget.
absl::Status CheckMemoryBudget(const v1::JobSpec& spec, const MemoryBudget& budget,
                               DatasetSize data = {});

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_SPEC_MEMORY_H_
