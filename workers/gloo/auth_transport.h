// The authenticated pairing that builds a TcpMesh (tcp_mesh.h): one listening socket per
// rank, bound to the address its peers use, and one connection per pair of ranks, made by
// the lower rank, each proven by tokens before a byte of the data plane crosses it:
//   - the connecting rank writes a token first: a magic, both ranks and the listening
//     rank's nonce, which that rank published in the job's rendezvous (the coordinator's
//     authenticated store) for this bootstrap attempt;
//   - the listening rank accepts every connection as a candidate, reads its first bytes
//     without blocking, closes it on the first byte that differs from every token it still
//     expects (garbage, a plausible but wrong token) or at EOF, keeps silent ones pending
//     (a half-open connection holds one of kMaxCandidates slots, the oldest is evicted),
//     and keeps only a connection that presents a token, answering it with a token of its
//     own (another magic, both ranks, the connector's nonce), which the connector checks.
// So a stray connection costs the real peer nothing, and neither side takes a socket that
// did not read this attempt's rendezvous. The tokens are bearer secrets, not a MAC of the
// traffic: what follows is the data plane's plaintext on those connections.
#ifndef LOCKSTEP_WORKERS_GLOO_AUTH_TRANSPORT_H_
#define LOCKSTEP_WORKERS_GLOO_AUTH_TRANSPORT_H_

#include <sys/socket.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "workers/gloo/tcp_mesh.h"

namespace lockstep::gloo_internal {

constexpr size_t kNonceBytes = 16;

// The token the connector `from` writes first to `to`'s listener, and the answer `from`
// (the listener) writes back to the connector `to`; `to_nonce` is the nonce `to` published.
std::string PairingToken(int from, int to, const std::string& to_nonce);
std::string PairingAnswer(int from, int to, const std::string& to_nonce);
// kNonceBytes from the kernel's random source (getrandom(2)).
absl::StatusOr<std::string> RandomNonce();

// A listening socket and the address its peers reach it at.
struct Listener {
  Listener() = default;
  Listener(Listener&& other) noexcept;
  Listener& operator=(Listener&&) = delete;
  ~Listener();  // closes fd
  int fd = -1;
  sockaddr_storage address = {};
};

// Listens on an ephemeral port of `hostname` (its first address that can be bound) or, if
// `hostname` is empty, of `interface`'s first IPv4 address (else IPv6). Errors:
// INVALID_ARGUMENT saying why nothing could be bound (the caller names the option).
absl::StatusOr<Listener> Listen(const std::string& hostname, const std::string& interface);

// A rank's address as published in the store (the bytes of a sockaddr_storage), and back.
// Errors: INVALID_ARGUMENT for a record that is not an IPv4 or IPv6 address.
std::string AddressRecord(const sockaddr_storage& address);
absl::StatusOr<sockaddr_storage> ParseAddressRecord(const std::string& record);
// "host:port" ("[host]:port" for IPv6), for messages.
std::string AddressString(const sockaddr_storage& address);

// What one rank knows when it pairs, in one bootstrap attempt.
struct Pairing {
  int rank = 0;
  int size = 1;
  std::vector<std::string> nonces;          // every rank's, this one's included
  std::vector<sockaddr_storage> addresses;  // every rank's listener (those above are dialled)
};

// Connects to every rank above this one and accepts every rank below on `listener`, as
// above, until all are paired (then closes the listener's socket), `deadline`, or
// `abort_fd` turning readable. Errors: UNAVAILABLE when a connect fails or a peer answers
// wrongly or hangs up; DEADLINE_EXCEEDED naming the ranks not paired; ABORTED.
absl::StatusOr<std::unique_ptr<TcpMesh>> PairMesh(Listener listener, const Pairing& pairing,
                                                  absl::Time deadline, int abort_fd);

}  // namespace lockstep::gloo_internal

#endif  // LOCKSTEP_WORKERS_GLOO_AUTH_TRANSPORT_H_
