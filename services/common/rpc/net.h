// Where every server and channel gets its credentials and limits: one place.
//
// A cluster speaks TLS under its own CA (services/common/security/credentials.h makes its files).
// The coordinator and the workers hold certificates naming their role (kCoordinatorIdentity,
// kWorkerIdentity) and present them on every call they make: mutual TLS. Clients of the
// job API hold only the CA (to check the coordinator) and a bearer token. Who may call
// what is decided by the handlers (services/common/security/auth.h); the transport only proves who
// is at the other end. Plaintext (Transport::Plaintext) is for loopback development and
// needs --insecure on every server.
#ifndef LOCKSTEP_SERVICES_COMMON_RPC_NET_H_
#define LOCKSTEP_SERVICES_COMMON_RPC_NET_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

// Largest message a server accepts or a channel receives (state travels in chunks).
inline constexpr int kMaxMessageBytes = 16 << 20;

// The names in the cluster's certificates (subject CN and DNS name), checked by servers
// (who is calling) and by channels (who answers, whatever address was dialled: pods and
// containers have no stable names).
inline constexpr char kCoordinatorIdentity[] = "lockstep-coordinator";
inline constexpr char kWorkerIdentity[] = "lockstep-worker";

// PEM files: the cluster's CA, and this process's certificate and key (both empty for a
// client that authenticates with a token).
struct TlsFiles {
  std::string ca, cert, key;
};

class Transport {
 public:
  static Transport Plaintext() { return Transport(); }
  // Reads the files; INVALID_ARGUMENT naming the flag's file that is missing or unreadable.
  static absl::StatusOr<Transport> Tls(const TlsFiles& files);

  bool secure() const { return secure_; }
  // TLS with this certificate; callers are asked for theirs, verified against the CA when
  // given (a client without one is let through to the handlers, which answer
  // UNAUTHENTICATED rather than failing the handshake).
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;
  // TLS to a server that must prove `server_identity`, with this certificate if any, and
  // `token` as a bearer token on every call when not empty.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const std::string& token) const;

 private:
  Transport() = default;
  bool secure_ = false;
  std::string ca_, cert_, key_;
};

// A channel with the limits, keepalive and reconnect settings every Lockstep channel uses.
// `server_identity` is the name the server's certificate must carry (ignored in plaintext).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const Transport& transport,
                                           const std::string& server_identity,
                                           const std::string& token = "");

// Applies credentials, message limits and keepalive to a server listening on `address`
// (host:port; port 0 picks one: see *selected_port), without SO_REUSEPORT: the port is this
// server's alone (listen_socket.h).
void ConfigureServer(grpc::ServerBuilder& builder, const std::string& address,
                     const Transport& transport, int* selected_port);

// A server listening on `address` with `services` (ConfigureServer's settings) and
// `interceptors` (e.g. RpcMetrics's), its port written to `port_file` when that is set.
// UNAVAILABLE naming the address (and the port when another process holds it) when it
// cannot listen there.
struct Serving {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};
absl::StatusOr<Serving> StartServer(
    const std::string& address, const Transport& transport,
    const std::vector<grpc::Service*>& services, const std::string& port_file,
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors = {});

// "host:port" -> host; the part before the last ':' (brackets stripped).
std::string HostOf(const std::string& address);
// Whether `address`'s host is this machine only (127.0.0.0/8, ::1, localhost).
bool IsLoopback(const std::string& address);

// The local IP address this host uses to reach `remote` (host:port): what peers should
// dial to reach us (127.0.0.1 on loopback, the pod or container IP in a cluster).
absl::StatusOr<std::string> LocalAddressFor(const std::string& remote);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_RPC_NET_H_
