#include "workers/gloo/gloo_collective.h"

#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <mutex>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/queued_collective.h"
#include "core/status_macros.h"
#include "gloo/allreduce.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/attr.h"
#include "gloo/transport/tcp/device.h"
#include "workers/gloo/gloo_status.h"
#include "workers/gloo/gloo_store.h"

namespace lockstep {
namespace {

using gloo_internal::CallGloo;

// Gloo's reduction function for AllreduceOptions: c = a + b, elementwise.
void SumFloats(void* c, const void* a, const void* b, size_t n) {
  float* out = static_cast<float*>(c);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

// Gloo's milliseconds, where zero means "no timeout": round up so that a short positive
// timeout stays a timeout.
std::chrono::milliseconds ToGlooTimeout(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return gloo::kNoTimeout;
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout + absl::Microseconds(999))));
}

std::string RankName(int rank, int size) { return absl::StrCat("gloo rank ", rank, " of ", size); }

absl::Status ValidateCreate(int rank, int size, const Store* store, const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", rank, " is not in a job of size ", size));
  }
  if (store == nullptr) return absl::InvalidArgumentError("gloo: null store");
  if (options.hostname.empty() == options.interface.empty()) {
    return absl::InvalidArgumentError(
        "gloo: set exactly one of GlooOptions.hostname and GlooOptions.interface");
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("gloo: GlooOptions.connect_timeout must be positive");
  }
  return absl::OkStatus();
}

// Gloo's own lookup treats only -1 from getaddrinfo(3) as failure and then walks an
// unset result list (a crash) for a name that does not resolve; so resolve it here first.
absl::Status CheckResolves(const std::string& hostname, const std::string& field) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rv = getaddrinfo(hostname.c_str(), nullptr, &hints, &result);
  if (rv != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: ", field, " does not resolve: ", gai_strerror(rv)));
  }
  freeaddrinfo(result);
  return absl::OkStatus();
}

// The TCP device of this rank, bound to the address the options name.
absl::StatusOr<std::shared_ptr<gloo::transport::Device>> CreateDevice(int rank, int size,
                                                                      const GlooOptions& options) {
  gloo::transport::tcp::attr attr;
  std::string field;
  if (!options.interface.empty()) {
    attr.iface = options.interface;
    field = absl::StrCat("GlooOptions.interface \"", options.interface, "\"");
  } else {
    attr.hostname = options.hostname;
    field = absl::StrCat("GlooOptions.hostname \"", options.hostname, "\"");
  }
  if (attr.iface.empty()) RETURN_IF_ERROR(CheckResolves(attr.hostname, field));
  std::shared_ptr<gloo::transport::Device> device;
  absl::Status status = CallGloo(absl::StrCat(RankName(rank, size), ": bind ", field),
                                 [&] { device = gloo::transport::tcp::CreateDevice(attr); });
  // Whatever Gloo threw, an address this host cannot bind is a configuration error.
  if (!status.ok()) return absl::InvalidArgumentError(status.message());
  return device;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> GlooCollective::Create(int rank, int size, Store* store,
                                                                   const GlooOptions& options) {
  static std::once_flag sigpipe;
  std::call_once(sigpipe, [] { signal(SIGPIPE, SIG_IGN); });
  RETURN_IF_ERROR(ValidateCreate(rank, size, store, options));
  ASSIGN_OR_RETURN(std::shared_ptr<gloo::transport::Device> device,
                   CreateDevice(rank, size, options));
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  // Gloo waits five times its context timeout for a TCP connect, and connect_timeout
  // bounds that too; the store waits are bounded by GlooStore's deadline instead.
  context->setTimeout(ToGlooTimeout(options.connect_timeout / 5));
  gloo_internal::GlooStore store_adapter(store, absl::Now() + options.connect_timeout);
  gloo::rendezvous::PrefixStore prefixed(options.prefix, store_adapter);
  RETURN_IF_ERROR(CallGloo(
      absl::StrCat(RankName(rank, size), ": connect full mesh under \"", options.prefix, "\""),
      [&] { context->connectFullMesh(prefixed, device); }));
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
