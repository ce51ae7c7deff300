// NcclComm: one rank's NCCL communicator and its lifecycle: rendezvous through a Store,
// non-blocking initialization bounded by a timeout, waits on its in-progress calls, and
// abort. Internal to workers/ (includes nccl.h). Thread-compatible: the thread that
// drives the collective owns it.
#ifndef LOCKSTEP_WORKERS_NCCL_NCCL_COMM_H_
#define LOCKSTEP_WORKERS_NCCL_NCCL_COMM_H_

#include <nccl.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/store.h"
#include "workers/nccl/nccl_watchdog.h"

namespace lockstep {

class NcclComm final : public AbortableComm {
 public:
  // Rank 0 calls ncclGetUniqueId and Set()s it (hex) under `key`; the other ranks Get()
  // it. Then ncclCommInitRankConfig, non-blocking, on the calling thread's current CUDA
  // device, awaited for at most `timeout`. Errors: DEADLINE_EXCEEDED naming the key or
  // the init (which is then aborted); NCCL's error otherwise (NcclStatus: UNAVAILABLE
  // when a peer is lost); INVALID_ARGUMENT for a malformed id in the store.
  static absl::StatusOr<std::unique_ptr<NcclComm>> Create(int rank, int size, Store* store,
                                                          const std::string& key,
                                                          absl::Duration timeout);
  // Finalizes and destroys the communicator; aborts it when that does not finish within
  // the creation timeout.
  ~NcclComm() override;

  // The communicator; null once aborted.
  ncclComm_t get() const { return comm_; }
  // OK while usable; after an abort, its reason.
  const absl::Status& error() const { return error_; }

  // Waits until the communicator's last call is no longer in progress (non-blocking
  // communicators answer ncclInProgress while they enqueue). On an error, or after
  // `timeout`, aborts: NCCL's error (NcclStatus) or DEADLINE_EXCEEDED, naming `what`.
  absl::Status Await(absl::Duration timeout, const char* what);

  absl::Status AsyncError() override;
  void Abort(const absl::Status& why) override;

 private:
  NcclComm(int rank, int size, absl::Duration timeout)
      : rank_(rank), size_(size), timeout_(timeout) {}
  std::string Describe() const;

  const int rank_, size_;
  const absl::Duration timeout_;
  ncclComm_t comm_ = nullptr;
  absl::Status error_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_NCCL_NCCL_COMM_H_
