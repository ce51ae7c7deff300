// Where every server and channel gets its credentials and limits: one place, so that
// TLS and tokens can later be switched on for all of them at once. Plaintext for now
// (loopback and private cluster networks).
#ifndef LOCKSTEP_SERVICES_COMMON_NET_H_
#define LOCKSTEP_SERVICES_COMMON_NET_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

// Largest message a server accepts or a channel receives (state travels in chunks).
inline constexpr int kMaxMessageBytes = 16 << 20;

std::shared_ptr<grpc::ServerCredentials> ServerCredentials();
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// Applies credentials, message limits and keepalive to a server listening on `address`
// (host:port; port 0 picks one: see *selected_port).
void ConfigureServer(grpc::ServerBuilder& builder, const std::string& address, int* selected_port);

// A server listening on `address` with `services` (ConfigureServer's settings), its port
// written to `port_file` when that is set. UNAVAILABLE naming the address when it cannot
// listen there.
struct Serving {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};
absl::StatusOr<Serving> StartServer(const std::string& address,
                                    const std::vector<grpc::Service*>& services,
                                    const std::string& port_file);

// "host:port" -> host; the part before the last ':' (brackets stripped).
std::string HostOf(const std::string& address);

// The local IP address this host uses to reach `remote` (host:port): what peers should
// dial to reach us (127.0.0.1 on loopback, the pod or container IP in a cluster).
absl::StatusOr<std::string> LocalAddressFor(const std::string& remote);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_NET_H_
