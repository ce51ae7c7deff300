// The authenticated pairing that builds a TcpMesh. Contract: auth_transport.h.
#include "workers/gloo/auth_transport.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep::gloo_internal {
namespace {

constexpr char kConnectMagic[] = "lockstep-gloo-1";  // 16 bytes with its NUL
constexpr char kAnswerMagic[] = "lockstep-ack--1";
constexpr size_t kTokenBytes = sizeof(kConnectMagic) + 8 + kNonceBytes;
constexpr int kMaxCandidates = 8;  // connections the listener holds unauthenticated
constexpr int kBacklog = 64;       // room for stray connections ahead of the peers'

void PutRank(std::string* out, int rank) {
  const uint32_t r = static_cast<uint32_t>(rank);
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(r >> shift));
}

std::string Token(const char (&magic)[16], int from, int to, const std::string& to_nonce) {
  std::string token(magic, sizeof(magic));
  PutRank(&token, from);
  PutRank(&token, to);
  token += to_nonce;
  token.resize(kTokenBytes, '\0');
  return token;
}

socklen_t Length(const sockaddr_storage& address) {
  return address.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// A socket of `family` listening on `address` (port 0: one the kernel picks); -1 and errno.
int ListenOn(const sockaddr* address, socklen_t length) {
  const int fd = socket(address->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (bind(fd, address, length) != 0 || listen(fd, kBacklog) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// Sends all of `bytes` at once (a fresh socket's buffer takes a token): false otherwise.
bool SendWhole(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT) ==
         static_cast<ssize_t>(bytes.size());
}

// Reads what has come of a token into *got (up to kTokenBytes): false at EOF or on an
// error, true otherwise (nothing new included).
bool ReadToken(int fd, std::string* got) {
  char buf[kTokenBytes];
  const ssize_t n = ::recv(fd, buf, kTokenBytes - got->size(), MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  if (n == 0) return false;
  got->append(buf, static_cast<size_t>(n));
  return true;
}

// One rank's pairing: the poll loop over its listener, its dials and its candidates.
class Pairer {
 public:
  Pairer(Listener listener, const Pairing& pairing, int abort_fd)
      : listener_(std::move(listener)),
        p_(pairing),
        abort_fd_(abort_fd),
        links_(pairing.size, -1),
        dials_(pairing.size),
        candidates_(kMaxCandidates) {}

  ~Pairer() {
    for (int fd : links_) {
      if (fd >= 0) ::close(fd);
    }
    for (Dial& d : dials_) {
      if (d.fd >= 0) ::close(d.fd);
    }
    for (Candidate& c : candidates_) Close(c);
  }

  absl::StatusOr<std::vector<int>> Run(absl::Time deadline) {
    for (int peer = p_.rank + 1; peer < p_.size; ++peer) {
      if (absl::Status s = StartDial(peer); !s.ok()) return s;
    }
    while (Unpaired() > 0) {
      if (absl::Status s = WaitAndHandle(deadline); !s.ok()) return s;
    }
    std::vector<int> links = links_;
    links_.assign(p_.size, -1);
    return links;
  }

 private:
  struct Dial {
    int fd = -1;
    bool connected = false;  // and the token sent
    std::string answer;      // what has come of the peer's answer
  };
  struct Candidate {
    int fd = -1;
    uint64_t order = 0;  // accept order: the oldest is evicted when all slots are taken
    std::string got;     // what has come of its token
  };

  int Unpaired() const {
    int n = 0;
    for (int q = 0; q < p_.size; ++q) n += q != p_.rank && links_[q] < 0;
    return n;
  }

  absl::Status Unavailable(int peer, const std::string& what) const {
    return absl::UnavailableError(
        absl::StrCat("rank ", peer, " at ", AddressString(p_.addresses[peer]), ": ", what));
  }

  absl::Status StartDial(int peer) {
    const sockaddr_storage& to = p_.addresses[peer];
    Dial& d = dials_[peer];
    d.fd = socket(to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (d.fd < 0) return Unavailable(peer, absl::StrCat("socket: ", strerror(errno)));
    if (::connect(d.fd, reinterpret_cast<const sockaddr*>(&to), Length(to)) != 0 &&
        errno != EINPROGRESS) {
      return Unavailable(peer, absl::StrCat("connect: ", strerror(errno)));
    }
    return absl::OkStatus();
  }

  absl::Status WaitAndHandle(absl::Time deadline) {
    std::vector<pollfd> fds;
    std::vector<int> owners;  // per pollfd: the peer of a dial, -1 - slot for a candidate
    fds.push_back({abort_fd_, POLLIN, 0});
    fds.push_back({listener_.fd, POLLIN, 0});
    owners.assign(2, 0);
    for (int q = p_.rank + 1; q < p_.size; ++q) {
      if (dials_[q].fd < 0) continue;
      fds.push_back({dials_[q].fd, static_cast<short>(dials_[q].connected ? POLLIN : POLLOUT), 0});
      owners.push_back(q);
    }
    for (int slot = 0; slot < kMaxCandidates; ++slot) {
      if (candidates_[slot].fd < 0) continue;
      fds.push_back({candidates_[slot].fd, POLLIN, 0});
      owners.push_back(-1 - slot);
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return TimedOut();
    const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(ms, INT_MAX))) < 0 &&
        errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", strerror(errno)));
    }
    if (fds[0].revents != 0) return absl::AbortedError("aborted");
    if (fds[1].revents != 0) Accept();
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      if (owners[i] >= 0) {
        if (absl::Status s = OnDial(owners[i]); !s.ok()) return s;
      } else {
        OnCandidate(candidates_[-1 - owners[i]]);
      }
    }
    return absl::OkStatus();
  }

  absl::Status TimedOut() const {
    std::vector<int> missing;
    for (int q = 0; q < p_.size; ++q) {
      if (q != p_.rank && links_[q] < 0) missing.push_back(q);
    }
    return absl::DeadlineExceededError(
        absl::StrCat("timed out pairing with rank(s) ", absl::StrJoin(missing, ", "),
                     " (the lower ones connect to this rank, this rank to the higher ones)"));
  }

  // Connector: sends the token once connected, then checks the peer's answer.
  absl::Status OnDial(int peer) {
    Dial& d = dials_[peer];
    if (!d.connected) {
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(d.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err == EINPROGRESS || err == EINTR) return absl::OkStatus();
      if (err != 0) return Unavailable(peer, absl::StrCat("connect: ", strerror(err)));
      if (!SendWhole(d.fd, PairingToken(p_.rank, peer, p_.nonces[peer]))) {
        return Unavailable(peer, "could not send the pairing token");
      }
      d.connected = true;
      return absl::OkStatus();
    }
    if (!ReadToken(d.fd, &d.answer)) {
      return Unavailable(peer, "hung up before answering the pairing (a stale address?)");
    }
    const std::string want = PairingAnswer(peer, p_.rank, p_.nonces[p_.rank]);
    if (want.compare(0, d.answer.size(), d.answer) != 0) {
      return Unavailable(peer, "answered the pairing with a wrong token");
    }
    if (d.answer.size() == kTokenBytes) {
      links_[peer] = d.fd;
      d.fd = -1;
    }
    return absl::OkStatus();
  }

  // Listener: takes every connection off the backlog as a candidate.
  void Accept() {
    for (;;) {
      const int fd = accept4(listener_.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN (none left), EINTR, ECONNABORTED: nothing to take
      Candidate* slot = &candidates_[0];
      for (Candidate& c : candidates_) {
        if (c.fd < 0) {
          slot = &c;
          break;
        }
        if (c.order < slot->order) slot = &c;
      }
      Close(*slot);  // evicts the oldest when every slot is taken
      slot->fd = fd;
      slot->order = ++accepted_;
    }
  }

  // Listener: reads what a candidate sent; keeps it once it presents the token of a rank
  // below that is not paired yet, drops it on the first byte no such token has, or at EOF.
  void OnCandidate(Candidate& c) {
    if (!ReadToken(c.fd, &c.got)) return Close(c);
    int from = -1;
    for (int q = 0; q < p_.rank && from < 0; ++q) {
      const std::string want = PairingToken(q, p_.rank, p_.nonces[p_.rank]);
      if (links_[q] < 0 && want.compare(0, c.got.size(), c.got) == 0) from = q;
    }
    if (from < 0) return Close(c);
    if (c.got.size() < kTokenBytes) return;  // the rest is on its way (or never comes)
    if (!SendWhole(c.fd, PairingAnswer(p_.rank, from, p_.nonces[from]))) return Close(c);
    links_[from] = c.fd;
    c.fd = -1;
    c.got.clear();
  }

  static void Close(Candidate& c) {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
    c.got.clear();
  }

  const Listener listener_;
  const Pairing& p_;
  const int abort_fd_;
  std::vector<int> links_;  // paired connections, per rank
  std::vector<Dial> dials_;
  std::vector<Candidate> candidates_;
  uint64_t accepted_ = 0;
};

}  // namespace

std::string PairingToken(int from, int to, const std::string& to_nonce) {
  return Token(kConnectMagic, from, to, to_nonce);
}

std::string PairingAnswer(int from, int to, const std::string& to_nonce) {
  return Token(kAnswerMagic, from, to, to_nonce);
}

absl::StatusOr<std::string> RandomNonce() {
  std::string nonce(kNonceBytes, '\0');
  size_t got = 0;
  while (got < nonce.size()) {
    const ssize_t n = getrandom(nonce.data() + got, nonce.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(absl::StrCat("getrandom: ", strerror(errno)));
    got += static_cast<size_t>(n);
  }
  return nonce;
}

Listener::Listener(Listener&& other) noexcept : fd(other.fd), address(other.address) {
  other.fd = -1;
}

Listener::~Listener() {
  if (fd >= 0) ::close(fd);
}

absl::StatusOr<Listener> Listen(const std::string& hostname, const std::string& interface) {
  Listener listener;
  int err = 0;
  if (!hostname.empty()) {
    addrinfo hints = {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rv = getaddrinfo(hostname.c_str(), nullptr, &hints, &found); rv != 0) {
      return absl::InvalidArgumentError(absl::StrCat("does not resolve: ", gai_strerror(rv)));
    }
    for (addrinfo* a = found; a != nullptr && listener.fd < 0; a = a->ai_next) {
      listener.fd = ListenOn(a->ai_addr, a->ai_addrlen);
      err = errno;
    }
    freeaddrinfo(found);
  } else {
    ifaddrs* found = nullptr;
    if (getifaddrs(&found) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("getifaddrs: ", strerror(errno)));
    }
    for (const int family : {AF_INET, AF_INET6}) {
      for (ifaddrs* a = found; a != nullptr && listener.fd < 0; a = a->ifa_next) {
        if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != family ||
            interface != a->ifa_name) {
          continue;
        }
        listener.fd =
            ListenOn(a->ifa_addr, family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
        err = errno;
      }
    }
    freeifaddrs(found);
    if (listener.fd < 0 && err == 0) {
      return absl::InvalidArgumentError("no such interface with an IPv4 or IPv6 address");
    }
  }
  if (listener.fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot listen there: ", strerror(err)));
  }
  socklen_t len = sizeof(listener.address);
  if (getsockname(listener.fd, reinterpret_cast<sockaddr*>(&listener.address), &len) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("getsockname: ", strerror(errno)));
  }
  return listener;
}

std::string AddressRecord(const sockaddr_storage& address) {
  return std::string(reinterpret_cast<const char*>(&address), sizeof(address));
}

absl::StatusOr<sockaddr_storage> ParseAddressRecord(const std::string& record) {
  sockaddr_storage address = {};
  if (record.size() != sizeof(address)) {
    return absl::InvalidArgumentError(
        absl::StrCat("an address record of ", record.size(), " bytes, not ", sizeof(address)));
  }
  std::memcpy(&address, record.data(), sizeof(address));
  if (address.ss_family != AF_INET && address.ss_family != AF_INET6) {
    return absl::InvalidArgumentError(
        absl::StrCat("an address record of family ", address.ss_family, ", not IPv4 or IPv6"));
  }
  return address;
}

std::string AddressString(const sockaddr_storage& address) {
  char host[NI_MAXHOST] = "?";
  char port[NI_MAXSERV] = "?";
  getnameinfo(reinterpret_cast<const sockaddr*>(&address), Length(address), host, sizeof(host),
              port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
  return address.ss_family == AF_INET6 ? absl::StrCat("[", host, "]:", port)
                                       : absl::StrCat(host, ":", port);
}

absl::StatusOr<std::unique_ptr<TcpMesh>> PairMesh(Listener listener, const Pairing& pairing,
                                                  absl::Time deadline, int abort_fd) {
  absl::StatusOr<std::vector<int>> links =
      Pairer(std::move(listener), pairing, abort_fd).Run(deadline);
  if (!links.ok()) return links.status();
  return TcpMesh::Create(pairing.rank, pairing.size, *std::move(links));
}

}  // namespace lockstep::gloo_internal
