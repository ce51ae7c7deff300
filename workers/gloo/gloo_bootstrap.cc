// The bootstrap of a GlooCollective: listens on the address peers use (GlooOptions.hostname
// or .interface, never a wildcard), and joins the full mesh through the store with
// authenticated pairings. Contract: gloo_bootstrap.h.
#include "workers/gloo/gloo_bootstrap.h"

#include <netdb.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "workers/gloo/auth_transport.h"
#include "workers/gloo/bootstrap_retry.h"

namespace lockstep::gloo_internal {
namespace {

std::string RankName(int rank, int size) { return absl::StrCat("gloo rank ", rank, " of ", size); }

bool IsWildcard(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host == "[::]" || host == "0" || host == "*";
}

// A name that does not resolve is a configuration error found before any attempt.
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

// The option that names the listening address, for errors.
std::string AddressField(const GlooOptions& options) {
  return options.interface.empty()
             ? absl::StrCat("GlooOptions.hostname \"", options.hostname, "\"")
             : absl::StrCat("GlooOptions.interface \"", options.interface, "\"");
}

// `status` with `what` before its message.
absl::Status Prefixed(const std::string& what, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

// One attempt: a fresh listener and nonce, published under the attempt's prefix, and the
// pairing with every peer.
class MeshAttempt final : public BootstrapAttempt {
 public:
  MeshAttempt(int rank, int size, Store* store, std::string prefix, absl::Time deadline,
              const GlooOptions& options, int abort_fd)
      : rank_(rank),
        size_(size),
        store_(store),
        prefix_(std::move(prefix)),
        deadline_(deadline),
        options_(options),
        abort_fd_(abort_fd) {}
  ~MeshAttempt() override { ::close(abort_fd_); }

  // An attempt whose Abort can wake its pairing (an eventfd). Errors: INTERNAL.
  static absl::StatusOr<std::unique_ptr<MeshAttempt>> Create(int rank, int size, Store* store,
                                                             std::string prefix,
                                                             absl::Time deadline,
                                                             const GlooOptions& options) {
    const int abort_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (abort_fd < 0) return absl::InternalError(absl::StrCat("eventfd: ", strerror(errno)));
    return std::make_unique<MeshAttempt>(rank, size, store, std::move(prefix), deadline, options,
                                         abort_fd);
  }

  absl::Status Join() override {
    const std::string name = RankName(rank_, size_);
    absl::StatusOr<Listener> listener = Listen(options_.hostname, options_.interface);
    // An address this host cannot listen on is a configuration error.
    if (!listener.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": bind ", AddressField(options_), ": ", listener.status().message()));
    }
    const std::string what = absl::StrCat(name, ": connect full mesh under \"", prefix_, "\"");
    absl::StatusOr<std::unique_ptr<TcpMesh>> mesh = Pair(*std::move(listener));
    absl::Status status = Prefixed(what, mesh.status());
    absl::MutexLock lock(&mu_);
    if (!status.ok() && !absl::IsDeadlineExceeded(status) && !aborted_.ok()) {
      return absl::AbortedError(absl::StrCat(status.message(), " (", aborted_.message(), ")"));
    }
    if (status.ok()) mesh_ = *std::move(mesh);
    return status;
  }

  void Abort(const absl::Status& why) override {
    absl::MutexLock lock(&mu_);
    if (!aborted_.ok()) return;
    aborted_ = why.ok() ? absl::AbortedError("aborted") : why;
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(abort_fd_, &one, sizeof(one));
  }

  std::shared_ptr<TcpMesh> mesh() const { return mesh_; }

 private:
  // Publishes this rank's nonce and address, reads the peers', and pairs.
  absl::StatusOr<std::unique_ptr<TcpMesh>> Pair(Listener listener) {
    Pairing pairing;
    pairing.rank = rank_;
    pairing.size = size_;
    pairing.nonces.resize(size_);
    pairing.addresses.resize(size_);
    ASSIGN_OR_RETURN(pairing.nonces[rank_], RandomNonce());
    pairing.addresses[rank_] = listener.address;
    if (size_ > 1) {
      RETURN_IF_ERROR(store_->Set(absl::StrCat(prefix_, "/nonce/", rank_), pairing.nonces[rank_]));
      RETURN_IF_ERROR(
          store_->Set(absl::StrCat(prefix_, "/", rank_), AddressRecord(listener.address)));
    }
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      if (q > rank_) {
        ASSIGN_OR_RETURN(const std::string record, Fetch(absl::StrCat(prefix_, "/", q)));
        absl::StatusOr<sockaddr_storage> address = ParseAddressRecord(record);
        if (!address.ok()) {
          return absl::UnavailableError(absl::StrCat("rank ", q, "'s address under \"", prefix_,
                                                     "/", q, "\": ", address.status().message()));
        }
        pairing.addresses[q] = *address;
      }
      ASSIGN_OR_RETURN(pairing.nonces[q], Fetch(absl::StrCat(prefix_, "/nonce/", q)));
    }
    return PairMesh(std::move(listener), pairing, deadline_, abort_fd_);
  }

  absl::StatusOr<std::string> Fetch(const std::string& key) {
    return store_->Get(key, std::max(absl::ZeroDuration(), deadline_ - absl::Now()));
  }

  const int rank_;
  const int size_;
  Store* const store_;
  const std::string prefix_;
  const absl::Time deadline_;
  const GlooOptions options_;
  const int abort_fd_;  // an eventfd, readable once aborted
  absl::Mutex mu_;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<TcpMesh> mesh_;  // Join's thread only
};

}  // namespace

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
    RETURN_IF_ERROR(CheckResolves(options.hostname, AddressField(options)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<TcpMesh>> Bootstrap(int rank, int size, Store* store,
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
            return MeshAttempt::Create(rank, size, store, prefix, retry.deadline, options);
          }));
  return static_cast<MeshAttempt*>(joined.attempt.get())->mesh();
}

}  // namespace lockstep::gloo_internal
