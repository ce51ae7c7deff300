// The security flags every Lockstep server takes, and the one decision they feed: TLS with the
// cluster's certificates (the default. Contract: server_security.h.
#include "services/common/security/server_security.h"

#include <spdlog/spdlog.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, tls_ca, "", "the cluster's CA certificate (PEM)");
ABSL_FLAG(std::string, tls_cert, "", "this server's certificate (PEM), issued by --tls_ca");
ABSL_FLAG(std::string, tls_key, "", "this server's private key (PEM)");
ABSL_FLAG(bool, insecure, false,
          "plaintext gRPC and no authentication (development on loopback; warns)");
ABSL_FLAG(bool, allow_insecure_remote, false,
          "with --insecure: allow addresses other machines can reach (anyone on the network "
          "can then run jobs, read weights and join as a worker)");

namespace lockstep {

absl::StatusOr<Transport> ServerTransport(const std::vector<std::string>& exposed) {
  if (!absl::GetFlag(FLAGS_insecure)) {
    TlsFiles files{absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
                   absl::GetFlag(FLAGS_tls_key)};
    if (files.ca.empty() || files.cert.empty() || files.key.empty()) {
      return absl::InvalidArgumentError(
          "TLS is required: pass --tls_ca, --tls_cert and --tls_key (make them with `lockstep "
          "certs`), or --insecure for plaintext on loopback");
    }
    return Transport::Tls(files);
  }
  for (const std::string& address : exposed) {
    if (!IsLoopback(address) && !absl::GetFlag(FLAGS_allow_insecure_remote)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--insecure with ", address,
                       ", which other machines can reach: use TLS, a loopback address, or add "
                       "--allow_insecure_remote"));
    }
  }
  spdlog::warn(
      "--insecure: plaintext gRPC, no authentication; anyone who can reach {} can run and "
      "cancel jobs, read weights and join as a worker",
      exposed.empty() ? "this server" : exposed.front());
  return Transport::Plaintext();
}

}  // namespace lockstep
