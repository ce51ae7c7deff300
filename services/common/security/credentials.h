// A cluster's credentials, made once and kept in a folder (mode 0700, files 0600):
//
//   ca.pem, ca-key.pem                  the cluster's own CA (ECDSA P-256, 10 years)
//   coordinator.pem, coordinator-key.pem  CN/DNS lockstep-coordinator (+ localhost,
//                                       127.0.0.1 and the extra hosts given)
//   workers/NAME.pem, NAME-key.pem      one per worker: CN lockstep-worker/NAME (its own
//                                       identity, auth.h), DNS lockstep-worker
//   tokens                              the coordinator's tokens file (auth.h)
//   bootstrap-token                     with which workers enroll (WorkerSigner, below)
//   admin.token, USER.token             one bearer token per caller
//
// Certificates are for both ends of a connection (serverAuth and clientAuth): the
// coordinator serves clients and workers, and calls workers with the same certificate.
// `lockstep cluster up` makes them in its folder; `lockstep certs` anywhere, and as
// Kubernetes Secrets.
#ifndef LOCKSTEP_SERVICES_COMMON_SECURITY_CREDENTIALS_H_
#define LOCKSTEP_SERVICES_COMMON_SECURITY_CREDENTIALS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/common/rpc/net.h"

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
std::string BootstrapTokenFile(const std::string& dir);  // workers enroll with it
std::string CaKeyFile(const std::string& dir);
std::string TokenFile(const std::string& dir, const std::string& user);  // admin: "admin"

// Kubernetes Secrets as YAML: lockstep-coordinator-tls (CA and its key, coordinator
// certificate and key, tokens file, bootstrap token), lockstep-worker-bootstrap (CA and
// bootstrap token: what enrolling workers hold) and one lockstep-worker-NAME-tls per worker
// of `workers` (CA, that worker's certificate and key): a worker pod never holds the
// coordinator's key, the CA's key, the tokens or another worker's key.
absl::StatusOr<std::string> KubernetesSecrets(const std::string& dir, const std::string& ns,
                                              const std::vector<std::string>& workers);

// Enrollment (a worker's certificate issued at its first start, as Kubernetes' kubelet TLS
// bootstrapping does): the worker makes its own key and a CSR; the coordinator, holding a
// bootstrap token's callers to account, signs it with the CA key into a certificate for a
// fresh identity (WorkerRegistry.Enroll). The key never leaves the worker.
struct KeyAndCsr {
  std::string key_pem, csr_pem;
};
absl::StatusOr<KeyAndCsr> NewWorkerKeyAndCsr();

// Signs workers' CSRs with the cluster's CA. Immutable; thread-safe.
class WorkerSigner {
 public:
  // The system's error naming a file that cannot be read; INVALID_ARGUMENT for one that is
  // not PEM.
  static absl::StatusOr<WorkerSigner> Load(const std::string& ca_file,
                                           const std::string& ca_key_file, absl::Duration validity);
  // A certificate (PEM) for the CSR's key, CN lockstep-worker/IDENTITY, DNS
  // lockstep-worker, valid for `validity`. INVALID_ARGUMENT naming csr_pem for a request
  // that is not PEM or whose signature does not verify.
  absl::StatusOr<std::string> Sign(const std::string& csr_pem, const std::string& identity) const;
  absl::Duration validity() const { return validity_; }

 private:
  WorkerSigner(std::string ca_pem, std::string ca_key_pem, absl::Duration validity)
      : ca_pem_(std::move(ca_pem)), ca_key_pem_(std::move(ca_key_pem)), validity_(validity) {}
  std::string ca_pem_, ca_key_pem_;
  absl::Duration validity_;
};

// When the certificate in `cert_file` expires.
absl::StatusOr<absl::Time> CertificateExpiry(const std::string& cert_file);
// Writes `data` readable by the owner only (0600), whole or not at all.
absl::Status WritePrivateFile(const std::string& path, const std::string& data);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_SECURITY_CREDENTIALS_H_
