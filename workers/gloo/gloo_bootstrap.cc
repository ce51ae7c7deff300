// The bootstrap of a GlooCollective: binds the rank's TCP device to the address peers use
// (GlooOptions.hostname or .interface, never a wildcard), and joins the full mesh through the store
// with authenticated pairings. Contract: gloo_bootstrap.h.
#include "workers/gloo/gloo_bootstrap.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/attr.h"
#include "workers/gloo/auth_transport.h"
#include "workers/gloo/bootstrap_retry.h"
#include "workers/gloo/gloo_status.h"
#include "workers/gloo/gloo_store.h"

namespace lockstep::gloo_internal {
namespace {

std::string RankName(int rank, int size) { return absl::StrCat("gloo rank ", rank, " of ", size); }

bool IsWildcard(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host == "[::]" || host == "0" || host == "*";
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

// The device's address as the options name it, and its name for errors.
std::pair<gloo::transport::tcp::attr, std::string> DeviceAttr(const GlooOptions& options) {
  gloo::transport::tcp::attr attr;
  if (!options.interface.empty()) {
    attr.iface = options.interface;
    return {attr, absl::StrCat("GlooOptions.interface \"", options.interface, "\"")};
  }
  attr.hostname = options.hostname;
  return {attr, absl::StrCat("GlooOptions.hostname \"", options.hostname, "\"")};
}

// One attempt: a fresh device (its pairs expect a fresh nonce) and Gloo's connectFullMesh
// under the attempt's prefix.
class GlooAttempt final : public BootstrapAttempt {
 public:
  GlooAttempt(int rank, int size, Store* store, std::string prefix, absl::Time deadline,
              const GlooOptions& options)
      : rank_(rank),
        size_(size),
        store_(store),
        prefix_(std::move(prefix)),
        deadline_(deadline),
        options_(options) {}

  absl::Status Join() override {
    const std::string name = RankName(rank_, size_);
    PairingSecrets secrets;
    secrets.rank = rank_;
    RETURN_IF_ERROR(CallGloo(name, [&] { secrets.nonce = RandomNonce(); }));
    secrets.peer_nonce = [this](int peer) { return PeerNonce(peer); };
    auto [attr, field] = DeviceAttr(options_);
    std::shared_ptr<AuthDevice> device;
    absl::Status bound = CallGloo(absl::StrCat(name, ": bind ", field),
                                  [&] { device = AuthDevice::Create(attr, secrets); });
    // Whatever Gloo threw, an address this host cannot bind is a configuration error.
    if (!bound.ok()) return absl::InvalidArgumentError(bound.message());
    {
      absl::MutexLock lock(&mu_);
      device_ = device;
      if (!aborted_.ok()) device->Abort(std::string(aborted_.message()));
    }
    RETURN_IF_ERROR(store_->Set(absl::StrCat(prefix_, "/nonce/", rank_), secrets.nonce));
    context_ = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    // Gloo waits five times its context timeout for a TCP connect; the store waits are
    // bounded by GlooStore's deadline instead.
    context_->setTimeout(
        ToGlooTimeout(std::max(absl::Milliseconds(1), deadline_ - absl::Now()) / 5));
    GlooStore store_adapter(store_, deadline_);
    gloo::rendezvous::PrefixStore prefixed(prefix_, store_adapter);
    std::shared_ptr<gloo::transport::Device> transport = device;
    absl::Status status =
        CallGloo(absl::StrCat(name, ": connect full mesh under \"", prefix_, "\""),
                 [&] { context_->connectFullMesh(prefixed, transport); });
    absl::MutexLock lock(&mu_);
    if (!status.ok() && !absl::IsDeadlineExceeded(status) && !aborted_.ok()) {
      return absl::AbortedError(absl::StrCat(status.message(), " (", aborted_.message(), ")"));
    }
    return status;
  }

  void Abort(const absl::Status& why) override {
    std::shared_ptr<AuthDevice> device;
    {
      absl::MutexLock lock(&mu_);
      if (!aborted_.ok()) return;
      aborted_ = why.ok() ? absl::AbortedError("aborted") : why;
      device = device_;
    }
    if (device != nullptr) device->Abort(std::string(why.message()));
  }

  std::shared_ptr<gloo::Context> context() const { return context_; }

 private:
  // The nonce `peer` published for this attempt (GlooStore's contract: throws StoreError).
  std::string PeerNonce(int peer) {
    absl::StatusOr<std::string> nonce =
        store_->Get(absl::StrCat(prefix_, "/nonce/", peer),
                    std::max(absl::ZeroDuration(), deadline_ - absl::Now()));
    if (!nonce.ok()) throw StoreError(std::move(nonce).status());
    return *std::move(nonce);
  }

  const int rank_;
  const int size_;
  Store* const store_;
  const std::string prefix_;
  const absl::Time deadline_;
  const GlooOptions options_;
  std::shared_ptr<gloo::rendezvous::Context> context_;  // Join's thread only
  absl::Mutex mu_;
  std::shared_ptr<AuthDevice> device_ ABSL_GUARDED_BY(mu_);
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::chrono::milliseconds ToGlooTimeout(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return gloo::kNoTimeout;
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout + absl::Microseconds(999))));
}

absl::Status ValidateBootstrap(int rank, int size, const Store* store, const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", rank, " is not in a job of size ", size));
  }
  if (store == nullptr) return absl::InvalidArgumentError("gloo: null store");
  if (options.hostname.empty() == options.interface.empty()) {
    return absl::InvalidArgumentError(
        "gloo: set exactly one of GlooOptions.hostname and GlooOptions.interface");
  }
  if (IsWildcard(options.hostname)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo: GlooOptions.hostname \"", options.hostname,
        "\" is a wildcard: the collective's listeners bind the address peers reach this "
        "worker at (--advertise_host), never every interface"));
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("gloo: GlooOptions.connect_timeout must be positive");
  }
  if (options.bootstrap_attempts < 1) {
    return absl::InvalidArgumentError("gloo: GlooOptions.bootstrap_attempts must be at least 1");
  }
  if (!options.hostname.empty()) {
    RETURN_IF_ERROR(CheckResolves(options.hostname, DeviceAttr(options).second));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<gloo::Context>> Bootstrap(int rank, int size, Store* store,
                                                         const GlooOptions& options) {
  RETURN_IF_ERROR(ValidateBootstrap(rank, size, store, options));
  BootstrapRetryOptions retry;
  retry.rank = rank;
  retry.size = size;
  retry.prefix = options.prefix;
  retry.deadline = absl::Now() + options.connect_timeout;
  retry.max_attempts = options.bootstrap_attempts;
  retry.on_retry = options.on_retry;
  ASSIGN_OR_RETURN(
      Joined joined,
      JoinWithRetries(
          store, retry,
          [&](int, const std::string& prefix) -> absl::StatusOr<std::unique_ptr<BootstrapAttempt>> {
            return std::make_unique<GlooAttempt>(rank, size, store, prefix, retry.deadline,
                                                 options);
          }));
  return static_cast<GlooAttempt*>(joined.attempt.get())->context();
}

}  // namespace lockstep::gloo_internal
