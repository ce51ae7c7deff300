// Enroll: a worker's own certificate without an operator issuing one. With a bootstrap
// token, the worker makes its key here (it never leaves identity_dir), sends a CSR to the
// coordinator (WorkerRegistry.Enroll, over TLS that checks the coordinator against the CA)
// and keeps the certificate it gets, naming a fresh identity. A certificate still valid for
// more than an hour is reused at the next start; otherwise the worker enrolls again (a new
// identity).
#ifndef LOCKSTEP_SERVICES_WORKER_ENROLL_H_
#define LOCKSTEP_SERVICES_WORKER_ENROLL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cancel.h"
#include "services/common/rpc/net.h"

namespace lockstep {

struct EnrollOptions {
  std::string coordinator;   // host:port
  std::string ca_file;       // the cluster's CA (PEM)
  std::string token_file;    // the bootstrap token (its first non-empty line)
  std::string identity_dir;  // where worker.pem and worker-key.pem are kept (mode 0700)
  std::string name;          // the prefix of the identity asked for (pod or host name)
  absl::Duration timeout = absl::Minutes(2);  // for the coordinator to answer
  const CancelToken* cancel = nullptr;        // ends the wait early (a SIGTERM)
};

// The TLS files to serve and call with. INVALID_ARGUMENT naming the token file; the
// coordinator's answer (UNAUTHENTICATED for a wrong token, DEADLINE_EXCEEDED when it does
// not answer within the timeout; the token's status once `cancel` is cancelled, promptly);
// the system's error naming a file that cannot be written.
absl::StatusOr<TlsFiles> EnsureEnrolled(const EnrollOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_WORKER_ENROLL_H_
