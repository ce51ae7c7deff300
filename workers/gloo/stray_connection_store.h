// For tests: a Store in front of another that plays the attacker on a job's collective
// listeners during bootstrap. The first time a rank's listening address is read from it
// (by a peer about to connect), it first opens stray connections to that listener, so
// that these are queued at the listener before the real peer's:
//   - one that sends random bytes,
//   - a half-open one that sends nothing and stays open,
//   - one that sends a plausible address record (the listener's own),
//   - one that sends a pairing token with the right magic but a wrong nonce,
//   - one that connects and closes at once.
// Every connection but the last stays open until the store is destroyed. Thread-safe.
#ifndef LOCKSTEP_WORKERS_GLOO_STRAY_CONNECTION_STORE_H_
#define LOCKSTEP_WORKERS_GLOO_STRAY_CONNECTION_STORE_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "core/store.h"
#include "workers/gloo/auth_transport.h"

namespace lockstep::testing {

class StrayConnectionStore final : public Store {
 public:
  // An address record (auth_transport.h's AddressRecord): a sockaddr_storage's bytes.
  static constexpr size_t kAddressBytes = sizeof(sockaddr_storage);

  explicit StrayConnectionStore(Store* base) : base_(base) {}
  ~StrayConnectionStore() override {
    absl::MutexLock lock(&mu_);
    for (int fd : open_) ::close(fd);
  }

  absl::Status Set(const std::string& key, const std::string& value) override {
    return base_->Set(key, value);
  }

  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    absl::StatusOr<std::string> value = base_->Get(key, timeout);
    if (value.ok() && IsAddressRecord(key, *value)) {
      absl::MutexLock lock(&mu_);
      if (attacked_.insert(key).second) {
        for (size_t at = 0; at < value->size(); at += kAddressBytes) {
          Attack(value->substr(at, kAddressBytes));
        }
      }
    }
    return value;
  }

  // Stray connections that reached a listener.
  int connected() {
    absl::MutexLock lock(&mu_);
    return connected_;
  }
  // The addresses (numeric host, no port) of the listeners attacked.
  std::set<std::string> hosts() {
    absl::MutexLock lock(&mu_);
    return hosts_;
  }

 private:
  // The key of rank R's address ends in "/R"; its value is an address record.
  static bool IsAddressRecord(const std::string& key, const std::string& value) {
    const size_t slash = key.rfind('/');
    const std::string last = key.substr(slash == std::string::npos ? 0 : slash + 1);
    if (last.empty() || !std::all_of(last.begin(), last.end(), absl::ascii_isdigit)) return false;
    if (absl::StrContains(key, "/nonce/") || absl::StrContains(key, "/verdict/")) return false;
    return !value.empty() && value.size() % kAddressBytes == 0;
  }

  // A socket connected to `addr` within a second, or -1.
  static int Dial(const sockaddr_storage& addr) {
    const int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    const socklen_t len = addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 && errno != EINPROGRESS) {
      ::close(fd);
      return -1;
    }
    pollfd p = {fd, POLLOUT, 0};
    int err = 0;
    socklen_t err_len = sizeof(err);
    if (poll(&p, 1, 1000) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) != 0 ||
        err != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  void Attack(const std::string& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    sockaddr_storage addr;
    std::memcpy(&addr, record.data(), sizeof(addr));
    if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return;
    char host[INET6_ADDRSTRLEN] = {};
    const void* ip =
        addr.ss_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr);
    inet_ntop(addr.ss_family, ip, host, sizeof(host));
    hosts_.insert(host);
    std::string random(64, '\0');
    for (char& c : random) c = static_cast<char>(rng_());
    const std::vector<std::string> payloads = {
        random, "", record,
        gloo_internal::PairingToken(0, 1, std::string(gloo_internal::kNonceBytes, 'x'))};
    for (const std::string& payload : payloads) {
      const int fd = Dial(addr);
      if (fd < 0) continue;  // a listener already closed: its rank has paired
      ++connected_;
      if (!payload.empty()) ::send(fd, payload.data(), payload.size(), MSG_NOSIGNAL);
      open_.push_back(fd);
    }
    if (const int fd = Dial(addr); fd >= 0) {
      ++connected_;
      ::close(fd);
    }
  }

  Store* const base_;
  absl::Mutex mu_;
  std::set<std::string> attacked_ ABSL_GUARDED_BY(mu_);
  std::vector<int> open_ ABSL_GUARDED_BY(mu_);
  int connected_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> hosts_ ABSL_GUARDED_BY(mu_);
  std::mt19937 rng_ ABSL_GUARDED_BY(mu_){22};
};

}  // namespace lockstep::testing

#endif  // LOCKSTEP_WORKERS_GLOO_STRAY_CONNECTION_STORE_H_
