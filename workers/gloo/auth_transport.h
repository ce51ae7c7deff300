// Gloo's TCP transport with an authenticated pairing. Debian's libgloo (git 20220518) gives
// every pair its own listening socket and takes the first connection that socket accepts
// as the peer, reading nothing from it: whoever connects first (a port scan, a stray
// client) becomes the peer, and the real peer's connect is then refused. Here each pair is
// a subclass of gloo's tcp::Pair (its event handler, listening socket and connect are
// virtual or protected, so no copy of Gloo's code is needed):
//   - the connecting side writes a token before any Gloo byte: a magic, both ranks and the
//     listening rank's nonce, which that rank published in the job's rendezvous (the
//     coordinator's authenticated store) for this bootstrap attempt;
//   - the listening side accepts every connection as a candidate, reads its first bytes
//     without blocking, closes it on the first byte that differs from the token it expects
//     (garbage, a plausible but wrong token) or on EOF, keeps silent ones pending (a
//     half-open connection holds one of kMaxCandidates slots, the oldest is evicted), and
//     hands only the connection that presents the token to Gloo. Its listening socket
//     stays open until then, so a stray connection costs the real peer nothing.
// The token is a bearer secret, not a MAC of the traffic: it proves that the connector
// read this attempt's rendezvous; what follows is Gloo's plaintext protocol on that one
// TCP connection.
#ifndef LOCKSTEP_WORKERS_GLOO_AUTH_TRANSPORT_H_
#define LOCKSTEP_WORKERS_GLOO_AUTH_TRANSPORT_H_

#include <functional>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gloo/transport/tcp/attr.h"
#include "gloo/transport/tcp/device.h"

namespace lockstep::gloo_internal {

class AuthPair;

// What one rank's pairs present and check in one bootstrap attempt.
struct PairingSecrets {
  static constexpr size_t kNonceBytes = 16;
  int rank = 0;
  std::string nonce;  // kNonceBytes random bytes, published to the peers through the store
  // The nonce `peer` published; may block on the store and throws StoreError on failure.
  // Called only while the device's pairs connect (within the bootstrap attempt that made
  // them), so it may refer to that attempt's store.
  std::function<std::string(int peer)> peer_nonce;
};

// The token the connector `from` writes first to `to`'s listening pair.
std::string PairingToken(int from, int to, const std::string& to_nonce);
// kNonceBytes from the kernel's random source (getrandom(2)).
std::string RandomNonce();

// A tcp::Device whose contexts make AuthPairs. Thread-safe.
class AuthDevice final : public gloo::transport::tcp::Device {
 public:
  // Binds `attr` as gloo::transport::tcp::CreateDevice does; throws what Gloo throws.
  static std::shared_ptr<AuthDevice> Create(const gloo::transport::tcp::attr& attr,
                                            PairingSecrets secrets);
  AuthDevice(const gloo::transport::tcp::attr& resolved, PairingSecrets secrets);

  std::shared_ptr<gloo::transport::Context> createContext(int rank, int size) override;

  // Fails every pair of this device, now and created later, with `why` (an IoException):
  // a connect waiting on one of them throws at once.
  void Abort(const std::string& why);

  const PairingSecrets& secrets() const { return secrets_; }

 private:
  friend class AuthPair;
  // Called by each AuthPair on construction (returns the abort reason, empty if none) and
  // destruction.
  std::string Register(AuthPair* pair);
  void Unregister(AuthPair* pair);

  const PairingSecrets secrets_;
  absl::Mutex mu_;  // taken before a pair's own mutex, never after
  std::set<AuthPair*> pairs_ ABSL_GUARDED_BY(mu_);
  std::string aborted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep::gloo_internal

#endif  // LOCKSTEP_WORKERS_GLOO_AUTH_TRANSPORT_H_
