// The NCCL collective: Collective::AllReduceSum as ncclAllReduce on a CUDA backend's
// stream, so that a step's all-reduce queues behind its backward pass and can be
// captured into the step's CUDA graph. Bootstraps through a Store (rank 0 publishes
// NCCL's unique id). AllReduceInt64 is ncclAllReduce on ncclInt64 with ncclSum or
// ncclMax, synchronous as AllReduceSum. This header includes no CUDA or NCCL header.
#ifndef LOCKSTEP_WORKERS_NCCL_NCCL_COLLECTIVE_H_
#define LOCKSTEP_WORKERS_NCCL_NCCL_COLLECTIVE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/backend.h"
#include "core/collective.h"
#include "core/store.h"

namespace lockstep {

struct NcclCollectiveOptions {
  // The Store key rank 0 publishes the unique id under; one per communicator (per job
  // and generation: a communicator is never reused after a failure).
  std::string key = "nccl_unique_id";
  // Bounds the rendezvous, the communicator's initialization and its teardown.
  absl::Duration timeout = absl::Seconds(60);
};

// Rank `rank` of `size`, on `backend`'s device and stream; `backend` must be a CUDA
// backend (NewCudaBackend) and, like `store`, outlive the collective. Each rank needs its
// own GPU: NCCL refuses two ranks of one communicator on one device.
//
// AllReduceSum queues ncclAllReduce (float, sum) on the backend's stream. Outside graph
// capture it then waits for the stream, so its status covers the all-reduce: UNAVAILABLE
// when a peer is lost, DEADLINE_EXCEEDED when it does not finish within the options'
// timeout. While the stream is being captured it only queues; a replay's failure comes
// from the backend's Synchronize(), which this collective watches (see nccl_watchdog.h).
// Either way the communicator is then aborted and every later call fails: rebuild the
// collective (and the backend, whose stream saw the failure) under a new key.
//
// StartAllReduceSum (gradient buckets overlapping backward) queues ncclAllReduce on a
// communication stream of the collective's own, after an event recorded on the backend's
// stream (so after the kernels that produced the bucket); Wait records an event on the
// communication stream and has the backend's stream wait for it, so the optimizer runs
// after every started all-reduce. Neither waits on the host: errors come from the
// backend's Synchronize() through the watchdog, as for a graph replay. Both work under
// CUDA graph capture (the events fork the capture into the communication stream and join
// it back). A synchronous AllReduceSum while started ones are pending first joins them,
// so NCCL never has two operations of the communicator in flight on different streams.
//
// Errors from creation: INVALID_ARGUMENT (bad rank or size, not a CUDA backend),
// FAILED_PRECONDITION (the backend already has a collective), and the rendezvous and
// init errors of NcclComm::Create (DEADLINE_EXCEEDED, UNAVAILABLE). Thread-compatible:
// the thread that drives the backend drives the collective.
absl::StatusOr<std::unique_ptr<Collective>> NewNcclCollective(
    int rank, int size, Store* store, Backend* backend, const NcclCollectiveOptions& options = {});

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_NCCL_NCCL_COLLECTIVE_H_
