#include "workers/gloo/gloo_collective.h"

#include <signal.h>

#include <chrono>
#include <mutex>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/queued_collective.h"
#include "core/status_macros.h"
#include "gloo/allreduce.h"
#include "gloo/common/error.h"
#include "gloo/context.h"
#include "workers/gloo/gloo_bootstrap.h"
#include "workers/gloo/gloo_status.h"

namespace lockstep {
namespace {

using gloo_internal::CallGloo;
using gloo_internal::ToGlooTimeout;

// Gloo's reduction function for AllreduceOptions: c = a + b, elementwise.
void SumFloats(void* c, const void* a, const void* b, size_t n) {
  float* out = static_cast<float*>(c);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

std::string RankName(int rank, int size) { return absl::StrCat("gloo rank ", rank, " of ", size); }

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> GlooCollective::Create(int rank, int size, Store* store,
                                                                   const GlooOptions& options) {
  static std::once_flag sigpipe;
  std::call_once(sigpipe, [] { signal(SIGPIPE, SIG_IGN); });
  ASSIGN_OR_RETURN(std::shared_ptr<gloo::Context> context,
                   gloo_internal::Bootstrap(rank, size, store, options));
  // Gloo's all-reduce blocks its caller: the queue gives it StartAllReduceSum's overlap.
  return std::make_unique<QueuedCollective>(
      std::unique_ptr<Collective>(new GlooCollective(rank, size, std::move(context))));
}

GlooCollective::GlooCollective(int rank, int size, std::shared_ptr<gloo::Context> context)
    : rank_(rank), size_(size), context_(context), abortable_(std::move(context)) {}

GlooCollective::~GlooCollective() = default;

absl::Status GlooCollective::AllReduceSum(float* data, size_t n, const CollectiveOptions& options) {
  absl::MutexLock lock(&mu_);
  const std::string what = absl::StrCat(RankName(rank_, size_), ": all-reduce of ", n, " floats");
  {
    absl::MutexLock abort_lock(&abort_mu_);
    if (!aborted_.ok() && error_.ok()) error_ = aborted_;
    in_flight_ = error_.ok();
  }
  absl::Cleanup landed = [this] {
    absl::MutexLock abort_lock(&abort_mu_);
    in_flight_ = false;
  };
  if (!error_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        RankName(rank_, size_), ": unusable after an earlier error: ", error_.message()));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": timeout must be positive"));
  }
  if (n == 0) return absl::OkStatus();
  if (data == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": null data"));
  absl::Status status = CallGloo(what, [&] {
    gloo::AllreduceOptions gloo_options(context_);
    gloo_options.setOutput(data, n);
    gloo_options.setReduceFunction(&SumFloats);
    gloo_options.setTimeout(ToGlooTimeout(options.timeout));
    gloo::allreduce(gloo_options);
  });
  if (!status.ok()) {
    if (absl::Status why = aborted(); !why.ok()) {
      status = absl::AbortedError(absl::StrCat(what, ": aborted: ", why.message()));
    }
    error_ = status;
    // Destroying the context closes every connection: peers waiting on this rank learn
    // at once that the step is lost instead of waiting out their timeouts.
    context_.reset();
    absl::MutexLock abort_lock(&abort_mu_);
    abortable_.reset();
  }
  return status;
}

absl::Status GlooCollective::aborted() {
  absl::MutexLock lock(&abort_mu_);
  return aborted_;
}

void GlooCollective::Abort(const absl::Status& why) {
  std::shared_ptr<gloo::Context> context;
  {
    absl::MutexLock lock(&abort_mu_);
    if (!aborted_.ok()) return;
    aborted_ = why.ok() ? absl::AbortedError("aborted") : why;
    // An all-reduce in flight here is not woken by closing our own connections (gloo
    // signals a closed pair's waiters only when the peer closes): it ends when the peers,
    // aborted too, close theirs, or at its timeout. Ranks not in flight close theirs now.
    if (in_flight_) return;
    context = abortable_;
  }
  if (context == nullptr) return;  // already failed: its connections are closed
  CallGloo(absl::StrCat(RankName(rank_, size_), ": abort"), [&] {
    context->closeConnections();
  }).IgnoreError();
}

}  // namespace lockstep
