// The security flags every Lockstep server takes, and the one decision they feed: TLS
// with the cluster's certificates (the default; nothing starts without them), or
// plaintext with --insecure, which warns, and on an address other machines can reach
// needs --allow_insecure_remote as well.
//
//   --tls_ca, --tls_cert, --tls_key   PEM files (`lockstep certs` makes them)
//   --insecure                        plaintext, no authentication: loopback development
//   --allow_insecure_remote           ... even where the network can reach it
#ifndef LOCKSTEP_SERVICES_COMMON_SECURITY_SERVER_SECURITY_H_
#define LOCKSTEP_SERVICES_COMMON_SECURITY_SERVER_SECURITY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/common/rpc/net.h"

namespace lockstep {

// The transport the flags ask for. `exposed`: the addresses this server listens on or
// dials, which decide whether plaintext stays on loopback. INVALID_ARGUMENT saying what
// to pass when a file is missing, or when plaintext would leave the machine unasked.
absl::StatusOr<Transport> ServerTransport(const std::vector<std::string>& exposed);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_SECURITY_SERVER_SECURITY_H_
