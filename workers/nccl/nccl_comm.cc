// NcclComm: one rank's NCCL communicator and its lifecycle: rendezvous through a Store, non-
// blocking initialization bounded by a timeout, waits on its in-progress calls, and abort.
// Contract: nccl_comm.h.
#include "workers/nccl/nccl_comm.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "workers/nccl/nccl_status.h"

namespace lockstep {
namespace {

constexpr auto kPoll = std::chrono::microseconds(100);

// The unique id travels as hex: stores may carry only text (a proto string field).
absl::StatusOr<ncclUniqueId> RendezvousId(int rank, Store* store, const std::string& key,
                                          absl::Duration timeout) {
  ncclUniqueId id;
  if (rank == 0) {
    NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    RETURN_IF_ERROR(store->Set(
        key, absl::BytesToHexString(absl::string_view(id.internal, sizeof(id.internal)))));
    return id;
  }
  ASSIGN_OR_RETURN(const std::string hex, store->Get(key, timeout));
  const std::string bytes = absl::HexStringToBytes(hex);
  if (hex.size() != 2 * sizeof(id.internal) || bytes.size() != sizeof(id.internal) ||
      absl::BytesToHexString(bytes) != absl::AsciiStrToLower(hex)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous key ", key, " holds no NCCL unique id (", hex.size(),
                     " characters, expected ", 2 * sizeof(id.internal), " hex digits)"));
  }
  std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  return id;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclComm>> NcclComm::Create(int rank, int size, Store* store,
                                                           const std::string& key,
                                                           absl::Duration timeout) {
  ASSIGN_OR_RETURN(const ncclUniqueId id, RendezvousId(rank, store, key, timeout));
  std::unique_ptr<NcclComm> comm(new NcclComm(rank, size, timeout));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t result = ncclCommInitRankConfig(&comm->comm_, size, id, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    const absl::Status status =
        NcclStatus(result, "ncclCommInitRankConfig", __FILE__, __LINE__, comm->comm_);
    if (comm->comm_ != nullptr) comm->Abort(status);
    return status;
  }
  RETURN_IF_ERROR(comm->Await(timeout, "communicator init"));
  return comm;
}

NcclComm::~NcclComm() {
  if (comm_ == nullptr) return;
  const ncclResult_t result = ncclCommFinalize(comm_);
  if (result != ncclSuccess && result != ncclInProgress) {
    Abort(NcclStatus(result, "ncclCommFinalize", __FILE__, __LINE__, comm_));
    return;
  }
  if (!Await(timeout_, "finalize").ok()) return;  // Await aborted it
  ncclCommDestroy(comm_);
}

std::string NcclComm::Describe() const { return absl::StrCat("NCCL rank ", rank_, " of ", size_); }

absl::Status NcclComm::Await(absl::Duration timeout, const char* what) {
  if (comm_ == nullptr) return error_;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess) state = result;
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      const absl::Status failed = NcclStatus(state, what, __FILE__, __LINE__, comm_);
      Abort(absl::Status(failed.code(), absl::StrCat(Describe(), ": ", failed.message())));
      return error_;
    }
    if (absl::Now() > deadline) {
      Abort(absl::DeadlineExceededError(absl::StrCat(
          Describe(), ": ", what, " did not finish within ", absl::FormatDuration(timeout),
          " (a peer is missing or stuck); communicator aborted")));
      return error_;
    }
    std::this_thread::sleep_for(kPoll);
  }
}

absl::Status NcclComm::AsyncError() {
  if (comm_ == nullptr) return error_;
  ncclResult_t state = ncclSuccess;
  const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
  if (result != ncclSuccess) state = result;
  return NcclStatus(state, "ncclCommGetAsyncError", __FILE__, __LINE__, comm_);
}

void NcclComm::Abort(const absl::Status& why) {
  if (error_.ok()) error_ = why;
  if (comm_ == nullptr) return;
  ncclCommAbort(comm_);
  comm_ = nullptr;
}

}  // namespace lockstep
