// Gloo's TCP transport with an authenticated pairing. Contract: auth_transport.h.
#include "workers/gloo/auth_transport.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gloo/transport/tcp/context.h"
#include "gloo/transport/tcp/pair.h"

namespace lockstep::gloo_internal {
namespace {

namespace tcp = ::gloo::transport::tcp;

// The subclasses below depend on the layout of Debian's libgloo0 (as new tcp::Pair and
// new tcp::Context allocate them there), declared partly by compat/gloo/common/memory.h.
static_assert(sizeof(tcp::Pair) == 0x380, "tcp::Pair differs from libgloo0 0.0~git20220518");
static_assert(sizeof(tcp::Context) == 0xe0, "tcp::Context differs from libgloo0 0.0~git20220518");

constexpr char kMagic[] = "lockstep-gloo-1";  // 16 bytes with its NUL
constexpr size_t kTokenBytes = sizeof(kMagic) + 8 + PairingSecrets::kNonceBytes;
constexpr int kMaxCandidates = 8;  // connections one listening pair holds unauthenticated
constexpr int kBacklog = 64;       // Gloo listens with a backlog of 1

void CheckOffset(ptrdiff_t got, ptrdiff_t want, const char* member) {
  if (got != want) {
    throw std::logic_error(absl::StrCat("tcp::Pair::", member, " is at ", got, ", not ", want,
                                        " as in libgloo0 0.0~git20220518"));
  }
}

void PutRank(std::string* out, int rank) {
  const uint32_t r = static_cast<uint32_t>(rank);
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(r >> shift));
}

}  // namespace

std::string PairingToken(int from, int to, const std::string& to_nonce) {
  std::string token(kMagic, sizeof(kMagic));
  PutRank(&token, from);
  PutRank(&token, to);
  token += to_nonce;
  token.resize(kTokenBytes, '\0');
  return token;
}

std::string RandomNonce() {
  std::string nonce(PairingSecrets::kNonceBytes, '\0');
  size_t got = 0;
  while (got < nonce.size()) {
    const ssize_t n = getrandom(nonce.data() + got, nonce.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(absl::StrCat("getrandom: ", strerror(errno)));
    got += static_cast<size_t>(n);
  }
  return nonce;
}

// One pair of an AuthDevice (see the header). All state below is guarded by the base's
// m_: the device's loop thread takes it with try_lock, as Gloo's own handler does (a
// thread holding it may be waiting for the loop to tick), and retries on the next tick
// (epoll is level-triggered, and nothing is read before the lock is held).
class AuthPair final : public tcp::Pair {
 public:
  AuthPair(tcp::Context* context, AuthDevice* device, int peer, std::chrono::milliseconds timeout)
      : tcp::Pair(context, device, peer, timeout), auth_(device) {
    // Where libgloo0's own code reads the members this class reads too.
    const char* base = reinterpret_cast<const char*>(static_cast<tcp::Pair*>(this));
    CheckOffset(reinterpret_cast<const char*>(&state_) - base, 0x2c, "state_");
    CheckOffset(reinterpret_cast<const char*>(&ex_) - base, 0x378, "ex_");
    const std::string aborted = device->Register(this);
    std::lock_guard<std::mutex> lock(m_);
    expected_ = PairingToken(peer, device->secrets().rank, device->secrets().nonce);
    for (Candidate& c : candidates_) c.pair = this;
    if (state_ == LISTENING) {
      // Room for stray connections in the backlog, and accept(2) that never blocks.
      ::listen(fd_, kBacklog);
      fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    }
    ready_ = true;
    if (!aborted.empty()) {
      FailLocked(aborted);
    } else if (state_ != LISTENING && ex_ == nullptr) {
      // Gloo's own handler ran before this constructor did and took a connection unread.
      FailLocked("gloo: a connection was accepted before the pair could authenticate it");
    }
  }

  ~AuthPair() override {
    auth_->Unregister(this);
    std::lock_guard<std::mutex> lock(m_);
    CloseCandidates();
    // Closing here, not in ~Pair, so that the loop never calls this handler once its
    // members are gone.
    if (state_ != CLOSED) changeState(CLOSED);
  }

  // Learns the peer's nonce (from the store) before Gloo connects, so that the token is
  // ready whichever side of the pair this turns out to be.
  void connect(const std::vector<char>& bytes) override {
    const std::string nonce = auth_->secrets().peer_nonce(rank_);
    {
      std::lock_guard<std::mutex> lock(m_);
      token_ = PairingToken(auth_->secrets().rank, rank_, nonce);
    }
    struct Cleanup {
      AuthPair* pair;
      ~Cleanup() {
        std::lock_guard<std::mutex> lock(pair->m_);
        pair->CloseCandidates();
      }
    } cleanup{this};
    tcp::Pair::connect(bytes);
  }

  void handleEvents(int events) override {
    std::unique_lock<std::mutex> lock(m_, std::try_to_lock);
    if (!lock || !ready_ || ex_ != nullptr) return;
    if (state_ == LISTENING) {
      AcceptCandidate();
      return;
    }
    if (state_ == CONNECTING && !token_sent_ && !SendToken()) return;
    lock.unlock();
    tcp::Pair::handleEvents(events);
  }

  void Fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(m_);
    FailLocked(why);
  }

 private:
  // A connection accepted on this pair's listening socket, not yet authenticated.
  struct Candidate final : public tcp::Handler {
    AuthPair* pair = nullptr;
    int fd = -1;
    uint64_t order = 0;  // accept order: the oldest is evicted when all slots are taken
    size_t got = 0;      // bytes of the token read so far
    void handleEvents(int /*events*/) override { pair->ReadCandidate(*this); }
  };

  void FailLocked(const std::string& why) {
    CloseCandidates();
    if (ex_ == nullptr && state_ != CLOSED) signalException(why);
  }

  void CloseCandidate(Candidate& c) {
    if (c.fd < 0) return;
    device_->unregisterDescriptor(c.fd, &c);
    ::close(c.fd);
    c.fd = -1;
  }

  void CloseCandidates() {
    for (Candidate& c : candidates_) CloseCandidate(c);
  }

  // Listening side: takes one connection off the backlog as a candidate.
  void AcceptCandidate() {
    const int fd = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN (taken back by the peer), EINTR, ECONNABORTED: nothing
    Candidate* slot = &candidates_[0];
    for (Candidate& c : candidates_) {
      if (c.fd < 0) {
        slot = &c;
        break;
      }
      if (c.order < slot->order) slot = &c;
    }
    CloseCandidate(*slot);  // evicts the oldest when every slot is taken
    slot->fd = fd;
    slot->order = ++accepted_;
    slot->got = 0;
    device_->registerDescriptor(fd, EPOLLIN, slot);
  }

  // Listening side: reads what a candidate sent; hands it to Gloo once it presents the
  // token, drops it on the first wrong byte or at EOF.
  void ReadCandidate(Candidate& c) {
    std::unique_lock<std::mutex> lock(m_, std::try_to_lock);
    if (!lock || c.fd < 0) return;
    if (state_ != LISTENING || ex_ != nullptr) {
      CloseCandidate(c);
      return;
    }
    std::array<char, kTokenBytes> buf;
    const ssize_t n = ::recv(c.fd, buf.data(), kTokenBytes - c.got, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0 || std::memcmp(buf.data(), expected_.data() + c.got, n) != 0) {
      CloseCandidate(c);
      return;
    }
    c.got += static_cast<size_t>(n);
    if (c.got < kTokenBytes) return;
    // Authenticated: this connection replaces the listening socket, as Gloo's
    // handleListening would have done with whatever it accepted first.
    const int fd = c.fd;
    device_->unregisterDescriptor(fd, &c);
    c.fd = -1;
    CloseCandidates();
    device_->unregisterDescriptor(fd_, this);
    ::close(fd_);
    fd_ = fd;
    handleConnected();
  }

  // Connecting side, once the socket is connected: the token goes out before any Gloo
  // byte can (Gloo writes only after this handler has run handleConnected). False after
  // failing the pair.
  bool SendToken() {
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {  // read (and so cleared) here: report it as Gloo would have
      FailLocked(absl::StrCat("connect ", peer_.str(), ": ", strerror(err)));
      return false;
    }
    const ssize_t n = ::send(fd_, token_.data(), token_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n != static_cast<ssize_t>(token_.size())) {
      FailLocked(absl::StrCat("send pairing token to ", peer_.str(), ": ",
                              n < 0 ? strerror(errno) : "short write"));
      return false;
    }
    token_sent_ = true;
    return true;
  }

  AuthDevice* const auth_;
  bool ready_ = false;    // set at the end of the constructor
  std::string expected_;  // the token a connecting peer must present
  std::string token_;     // the token this side presents when it connects
  bool token_sent_ = false;
  uint64_t accepted_ = 0;
  std::array<Candidate, kMaxCandidates> candidates_;
};

namespace {

class AuthContext final : public tcp::Context {
 public:
  AuthContext(std::shared_ptr<AuthDevice> device, int rank, int size)
      : tcp::Context(device, rank, size), auth_(device.get()) {}

  std::unique_ptr<gloo::transport::Pair>& createPair(int rank) override {
    pairs_[rank] = std::make_unique<AuthPair>(this, auth_, rank, getTimeout());
    return pairs_[rank];
  }

 private:
  AuthDevice* const auth_;  // owned by the base's device_
};

}  // namespace

std::shared_ptr<AuthDevice> AuthDevice::Create(const tcp::attr& attr, PairingSecrets secrets) {
  return std::make_shared<AuthDevice>(tcp::CreateDeviceAttr(attr), std::move(secrets));
}

AuthDevice::AuthDevice(const tcp::attr& resolved, PairingSecrets secrets)
    : tcp::Device(resolved), secrets_(std::move(secrets)) {}

std::shared_ptr<gloo::transport::Context> AuthDevice::createContext(int rank, int size) {
  return std::make_shared<AuthContext>(std::static_pointer_cast<AuthDevice>(shared_from_this()),
                                       rank, size);
}

void AuthDevice::Abort(const std::string& why) {
  absl::MutexLock lock(&mu_);
  if (aborted_.empty()) aborted_ = why.empty() ? "aborted" : why;
  for (AuthPair* pair : pairs_) pair->Fail(aborted_);
}

std::string AuthDevice::Register(AuthPair* pair) {
  absl::MutexLock lock(&mu_);
  pairs_.insert(pair);
  return aborted_;
}

void AuthDevice::Unregister(AuthPair* pair) {
  absl::MutexLock lock(&mu_);
  pairs_.erase(pair);
}

}  // namespace lockstep::gloo_internal
