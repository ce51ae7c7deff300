// GlooCollective: the CPU data plane. Contract: gloo_collective.h.
#include "workers/gloo/gloo_collective.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/queued_collective.h"
#include "core/status_macros.h"
#include "workers/gloo/gloo_bootstrap.h"
#include "workers/gloo/ring_allreduce.h"
#include "workers/gloo/shm_allreduce.h"
#include "workers/gloo/tcp_mesh.h"

namespace lockstep {
namespace {

// The all-reduce's deadline; an infinite timeout waits 100 hours, which keeps the clock
// arithmetic from overflowing.
std::chrono::steady_clock::time_point Deadline(absl::Duration timeout) {
  return std::chrono::steady_clock::now() +
         absl::ToChronoNanoseconds(std::min(timeout, absl::Hours(100)));
}

std::string RankName(int rank, int size) { return absl::StrCat("gloo rank ", rank, " of ", size); }

// `status`, its message prefixed with `what`.
absl::Status Prefixed(const std::string& what, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> GlooCollective::Create(int rank, int size, Store* store,
                                                                   const GlooOptions& options) {
  ASSIGN_OR_RETURN(std::shared_ptr<gloo_internal::TcpMesh> mesh,
                   gloo_internal::Bootstrap(rank, size, store, options));
  auto ring = std::make_unique<gloo_internal::RingAllReduce>(mesh);
  auto ring64 = std::make_unique<gloo_internal::RingAllReduceOf<int64_t>>(mesh);
  std::unique_ptr<gloo_internal::ShmAllReduce> shm;
  if (size > 1 && options.shared_memory) {
    absl::StatusOr<std::unique_ptr<gloo_internal::ShmAllReduce>> made =
        gloo_internal::ShmAllReduce::Create(rank, size, store, options.prefix,
                                            options.connect_timeout);
    if (!made.ok()) {
      return Prefixed(absl::StrCat(RankName(rank, size), ": set up the shared-memory path"),
                      made.status());
    }
    shm = *std::move(made);
  }
  // The all-reduce blocks its caller: the queue gives it StartAllReduceSum's overlap.
  return std::make_unique<QueuedCollective>(std::unique_ptr<Collective>(new GlooCollective(
      rank, size, std::move(mesh), std::move(ring), std::move(ring64), std::move(shm))));
}

GlooCollective::GlooCollective(int rank, int size, std::shared_ptr<gloo_internal::TcpMesh> mesh,
                               std::unique_ptr<gloo_internal::RingAllReduce> ring,
                               std::unique_ptr<gloo_internal::RingAllReduceOf<int64_t>> ring64,
                               std::unique_ptr<gloo_internal::ShmAllReduce> shm)
    : rank_(rank),
      size_(size),
      over_shm_(shm != nullptr),
      shm_floats_(shm != nullptr ? shm->capacity_floats() : 0),
      mesh_(mesh),
      ring_(std::move(ring)),
      ring64_(std::move(ring64)),
      shm_(std::move(shm)),
      abortable_(std::move(mesh)),
      abortable_shm_(shm_.get()) {}

GlooCollective::~GlooCollective() = default;

absl::Status GlooCollective::AllReduceSum(float* data, size_t n, const CollectiveOptions& options) {
  const std::string what = absl::StrCat(RankName(rank_, size_), ": all-reduce of ", n, " floats");
  return RunChecked(what, data, n, options, [&]() -> absl::Status {
    const auto deadline = Deadline(options.timeout);
    if (shm_ == nullptr) return Prefixed(what, ring_->Run(data, n, deadline));
    return Prefixed(what, shm_->Run(data, n, deadline));
  });
}

absl::Status GlooCollective::AllReduceInt64(int64_t* data, size_t n, ReduceOp op,
                                            const CollectiveOptions& options) {
  const std::string what = absl::StrCat(RankName(rank_, size_), ": ",
                                        op == ReduceOp::kSum ? "sum" : "max", " of ", n, " int64s");
  const bool maximum = op == ReduceOp::kMax;
  return RunChecked(what, data, n, options, [&]() -> absl::Status {
    const auto deadline = Deadline(options.timeout);
    if (shm_ == nullptr) return Prefixed(what, ring64_->Run(data, n, deadline, maximum));
    return Prefixed(what, shm_->Run(data, n, maximum, deadline));
  });
}

bool GlooCollective::CanAllReduceBy(int total, size_t align) const {
  return over_shm_ && total >= 1 && align >= 1 && shm_floats_ / total >= align;
}

absl::Status GlooCollective::AllReduceBy(std::span<const float* const> local, size_t n, float* out,
                                         const ChunkReduction& r,
                                         const CollectiveOptions& options) {
  const std::string what = absl::StrCat(RankName(rank_, size_), ": reduction of ", local.size(),
                                        " of ", r.total, " contributions of ", n, " floats");
  if (!CanAllReduceBy(r.total, r.align)) return absl::UnimplementedError(what + ": not here");
  return RunChecked(what, out, n, options, [&]() -> absl::Status {
    return Prefixed(what, shm_->RunBy(local, n, out, r, Deadline(options.timeout)));
  });
}

absl::Status GlooCollective::RunChecked(const std::string& what, void* data, size_t n,
                                        const CollectiveOptions& options,
                                        const std::function<absl::Status()>& run) {
  absl::MutexLock lock(&mu_);
  if (absl::Status why = aborted(); !why.ok() && error_.ok()) error_ = why;
  if (!error_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        RankName(rank_, size_), ": unusable after an earlier error: ", error_.message()));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": timeout must be positive"));
  }
  if (n == 0) return absl::OkStatus();
  if (data == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": null data"));
  absl::Status status = run();
  if (!status.ok()) {
    if (absl::Status why = aborted(); !why.ok()) {
      status = absl::AbortedError(absl::StrCat(what, ": aborted: ", why.message()));
    }
    Fail(status);
  }
  return status;
}

void GlooCollective::Fail(const absl::Status& status) {
  error_ = status;
  {
    absl::MutexLock abort_lock(&abort_mu_);
    abortable_.reset();
    abortable_shm_ = nullptr;
  }
  // Closing everything tells the peers waiting on this rank at once that the step is lost
  // (a closed connection; a segment whose lock is free) instead of at their timeouts.
  shm_.reset();
  ring_.reset();
  ring64_.reset();
  mesh_.reset();
}

absl::Status GlooCollective::aborted() {
  absl::MutexLock lock(&abort_mu_);
  return aborted_;
}

void GlooCollective::Abort(const absl::Status& why) {
  absl::MutexLock lock(&abort_mu_);
  if (!aborted_.ok()) return;
  aborted_ = why.ok() ? absl::AbortedError("aborted") : why;
  // Shared memory wakes an all-reduce in flight here and the peers' waits on this rank;
  // the mesh wakes one over TCP (a peer stopped mid-call closes nothing) and shuts the
  // connections down, which the peers see at once. An all-reduce in flight then fails,
  // which closes everything (Fail).
  if (abortable_shm_ != nullptr) abortable_shm_->Abort(aborted_);
  if (abortable_ != nullptr) abortable_->Abort();
}

}  // namespace lockstep
