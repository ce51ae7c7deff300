// A cluster's credentials, made once and kept in a folder (mode 0700, files 0600):
//
//   ca.pem, ca-key.pem                  the cluster's own CA (ECDSA P-256, 10 years)
//   coordinator.pem, coordinator-key.pem  CN/DNS lockstep-coordinator (+ localhost,
//                                       127.0.0.1 and the extra hosts given)
//   workers/NAME.pem, NAME-key.pem      one per worker: CN lockstep-worker/NAME (its own
//                                       identity, auth.h), DNS lockstep-worker
//   tokens                              the coordinator's tokens file (auth.h)
//   admin.token, USER.token             one bearer token per caller
//
// Certificates are for both ends of a connection (serverAuth and clientAuth): the
// coordinator serves clients and workers, and calls workers with the same certificate.
// `lockstep cluster up` makes them in its folder; `lockstep certs` anywhere, and as
// Kubernetes Secrets.
#ifndef LOCKSTEP_SERVICES_COMMON_CREDENTIALS_H_
#define LOCKSTEP_SERVICES_COMMON_CREDENTIALS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/common/net.h"

namespace lockstep {

struct CredentialsOptions {
  std::string dir;
  std::vector<std::string> hosts;    // more names or IPs for the coordinator's certificate
  std::vector<std::string> users;    // callers with role user (admin always exists)
  std::vector<std::string> workers;  // worker names (ValidWorkerName), each its own certificate
};

// Makes whatever of the above is missing in `dir` (a folder already complete is left as
// it is, so a cluster restarted keeps its clients working); tokens for users not yet in
// the tokens file are added, certificates for workers not yet issued are issued.
// INVALID_ARGUMENT for a bad user or worker name; the system's error naming the file
// otherwise.
absl::Status MakeCredentials(const CredentialsOptions& options);

// The files each role is given.
TlsFiles CoordinatorTls(const std::string& dir);
TlsFiles WorkerTls(const std::string& dir, const std::string& worker);  // workers/NAME
TlsFiles ClientTls(const std::string& dir);                             // the CA only
std::string TokensFile(const std::string& dir);
std::string TokenFile(const std::string& dir, const std::string& user);  // admin: "admin"

// Kubernetes Secrets as YAML: lockstep-coordinator-tls (CA, coordinator certificate and
// key, tokens file) and one lockstep-worker-NAME-tls per worker of `workers` (CA, that
// worker's certificate and key): a worker pod never holds the coordinator's key, the
// tokens or another worker's key.
absl::StatusOr<std::string> KubernetesSecrets(const std::string& dir, const std::string& ns,
                                              const std::vector<std::string>& workers);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_CREDENTIALS_H_
