// Listening sockets that are this process's alone. gRPC turns SO_REUSEPORT on by default,
// which lets a second server bind a port already served and take half its connections;
// every Lockstep listener leaves it off (ConfigureServer sets GRPC_ARG_ALLOW_REUSEPORT to
// 0, and the metrics listener binds with ListenTcp), so that a taken port is an error
// naming it, which the servers turn into exit 1 (deploy/CONFIGURATION.md).
#ifndef LOCKSTEP_SERVICES_COMMON_RPC_LISTEN_SOCKET_H_
#define LOCKSTEP_SERVICES_COMMON_RPC_LISTEN_SOCKET_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lockstep {

// A TCP socket bound to `address` (host:port, [v6]:port; port 0 picks one) and listening,
// with SO_REUSEADDR (a port in TIME_WAIT is free) and without SO_REUSEPORT; close-on-exec
// and non-blocking. `what` names the listener in errors ("metrics"). INVALID_ARGUMENT for
// an address without a port or a host that does not resolve; UNAVAILABLE naming the port
// when it is in use, or the address and the system's error otherwise.
absl::StatusOr<int> ListenTcp(const std::string& what, const std::string& address, int backlog);

// OK when `address`'s port can be bound now as a server would (as ListenTcp, released
// again at once); the same errors as ListenTcp. Port 0 is always free. A check for the
// start of a server's main, before it does anything it would have to undo: the server's
// own bind may still fail later (a race), and reports the same way.
absl::Status CheckPortFree(const std::string& what, const std::string& address);

// CheckPortFree for each (flag, address) pair with a non-empty address, the error naming the
// flag: the start of a server's main.
absl::Status CheckPortsFree(const std::vector<std::pair<std::string, std::string>>& listeners);

// The port a bound socket listens on; 0 when it cannot tell.
int BoundPort(int fd);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_RPC_LISTEN_SOCKET_H_
