// The commands a replica executes and what it answers, as plain structs: what the job
// loop (services/coordinator) sends each worker and what the Worker API carries
// (services/worker translates them to and from its protos). A replica is the worker's
// side of one job (workers/replica.h).
#ifndef LOCKSTEP_CORE_COMMANDS_H_
#define LOCKSTEP_CORE_COMMANDS_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "core/rng/threefry.h"
#include "lockstep/v1/spec.pb.h"

namespace lockstep {

// Which replica of which job: the job's validated spec and this replica's place in it.
struct ReplicaConfig {
  v1::JobSpec spec;
  int rank = 0;
  int world_size = 1;
  absl::Duration collective_timeout = absl::Seconds(30);
  // Logical replicas (docs/elastic.md): the job's V (0: none, one replica per worker as
  // today) and the contiguous range of them this replica computes, [logical_first,
  // logical_first + logical_count); local batches of B/V rows.
  int logical_replicas = 0;
  int logical_first = 0;
  int logical_count = 0;
};

// What Prepare hands a worker: the job, its replica's config and where the replica's
// collective meets its peers (a namespace in the coordinator's rendezvous store).
struct JobAssignment {
  std::string job_id;
  ReplicaConfig replica;
  std::string rendezvous_prefix;
  // Elastic resize (docs/elastic.md): the worker continues from the state it holds for
  // this job, at the header's step, instead of state sent in the Prepare (none is).
  bool keep_state = false;
};

// A step of a job on logical replicas as every worker that completed it knows it: all V
// replicas' losses and accuracies in replica order (StepMetrics.all_replica_loss). A
// worker keeps its last few, so that an elastic resize can report a step whose answer
// was lost with a peer (docs/elastic.md).
struct CompletedStep {
  int64_t step = 0;  // the state's step after it (the command's step + 1)
  std::vector<float> losses, accuracies;
};

// What a replica says once its state is loaded.
struct PrepareResult {
  int64_t train_examples = 0;
  int64_t test_examples = 0;
  uint64_t param_checksum = 0;  // of the params as loaded
  int64_t step = 0;             // the state's step as loaded
  // keep_state: the steps the state went through past the header's step, in order (the
  // coordinator had not heard of them); empty otherwise.
  std::vector<CompletedStep> ahead;
};

// One training step: everything it needs, so that it can be re-sent and gives the same
// result. `indices` must outlive the call it is passed to.
struct StepCommand {
  int64_t step = 0;                  // global step from 0; must be the replica's next
  rng::Key key;                      // this replica's 'dropout' stream root
  std::span<const int32_t> indices;  // this replica's shard of the global batch
  bool want_checksum = false;        // ParamChecksum of the params after the update
  // The all-reduce's wait for the peers, at most the job's; zero: the job's.
  absl::Duration collective_timeout = absl::ZeroDuration();
  // The job's audit (docs/audit.md): the digest of the local gradients this step feeds into
  // the all-reduce (StepResult.grad_digest).
  bool want_grad_digest = false;
  // With `audit`, before the step: another rank's shard recomputed at the current state,
  // gradients only (no all-reduce, no update): StepResult.audit_digest and audit_loss.
  bool audit = false;
  std::span<const int32_t> audit_indices;  // must outlive the call, as `indices`
  rng::Key audit_key;
  // Logical replicas: their 'dropout' stream roots, one per local replica in replica order
  // (`key` unused), and `indices` their rows back to back. Must outlive the call.
  std::span<const rng::Key> keys;
  // The epoch's data key (StepPlan::data_key): a streamed dataset's random preprocessing
  // of example i draws from FoldIn(data_key, i).
  rng::Key data_key;
};

struct StepResult {
  int64_t step = 0;
  float loss = 0;  // mean over this replica's shard
  float accuracy = 0;
  uint64_t param_checksum = 0;  // when asked
  // Where the time went (host clock; milliseconds).
  double compute_ms = 0, allreduce_ms = 0, update_ms = 0, step_ms = 0;
  uint64_t grad_digest = 0;  // want_grad_digest: GradDigest of the local gradients
  bool audited = false;      // the command's audit shard was recomputed:
  uint64_t audit_digest = 0;
  float audit_loss = 0;
  // A BatchNorm model on logical replicas: GradDigest of the audited replica's BatchNorm
  // contributions (StepExecutor::local_statistics), fed (want_grad_digest) and recomputed
  // (audited); 0 otherwise.
  uint64_t stats_digest = 0, audit_stats_digest = 0;
  // Logical replicas: each local replica's loss and accuracy, in replica order (loss and
  // accuracy above: their float mean).
  std::vector<float> replica_losses, replica_accuracies;
};

// Sums over a range of the test split: the loss summed per example, and the predictions
// right of all made (a sequence model makes one per position of each window: accuracy is
// per token). predictions 0 (an older worker's answer): correct counts examples.
struct EvalSums {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t count = 0;
  int64_t predictions = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_COMMANDS_H_
