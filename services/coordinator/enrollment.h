// Enrollment: how a worker without a certificate gets its own (WorkerRegistry.Enroll). It
// proves it may join with a bootstrap token (a file of tokens, one a line, at least 16
// characters; kept as SHA-256 digests, compared in constant time) and sends a CSR for a key
// it made itself (RSA of 2048 bits or more, or EC P-256 or larger); the coordinator signs it
// with the CA key (WorkerSigner) for a fresh identity NAME-<16 random hex digits>, never
// given twice, where NAME is the requested name shortened to fit a certificate's CN (a long
// name's first characters and a hash of it); the full name goes into the certificate too
// (a SAN, urn:lockstep:worker-name:NAME). The bootstrap token lets its
// holder add workers, never act as an existing one; revoking (WorkerPool::Revoke) ends one.
// Immutable after Load; thread-safe.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_ENROLLMENT_H_
#define LOCKSTEP_SERVICES_COORDINATOR_ENROLLMENT_H_

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lockstep/v1/registry.pb.h"
#include "services/common/credentials.h"

namespace lockstep {

class Enrollment {
 public:
  // INVALID_ARGUMENT naming the tokens file when it holds no token or a short one; the
  // signer's errors for the CA files.
  static absl::StatusOr<std::unique_ptr<Enrollment>> Load(const std::string& ca_file,
                                                          const std::string& ca_key_file,
                                                          const std::string& tokens_file,
                                                          absl::Duration validity);

  // `authorization`: the call's "authorization" header. UNAUTHENTICATED without a
  // bootstrap token; then `admit`'s error, if any, for the identity's prefix (the caller's
  // policy: e.g. a revoked worker's name); Sign's INVALID_ARGUMENT for a bad CSR.
  using Admit = std::function<absl::Status(const std::string& prefix)>;
  absl::StatusOr<v1::EnrollResponse> Enroll(absl::string_view authorization,
                                            const v1::EnrollRequest& request,
                                            const Admit& admit = nullptr) const;

  // The identity's prefix made from a requested name: [A-Za-z0-9._-] kept, anything else
  // '-', "worker" if nothing is left; at most 31 characters, so that the identity's CN fits
  // X.509's 64: a longer name becomes its first 22 characters, '-' and 8 hex digits of
  // its SHA-256.
  static std::string IdentityPrefix(absl::string_view name);

 private:
  Enrollment(WorkerSigner signer, std::vector<std::array<unsigned char, 32>> digests)
      : signer_(std::move(signer)), digests_(std::move(digests)) {}
  const WorkerSigner signer_;
  const std::vector<std::array<unsigned char, 32>> digests_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_ENROLLMENT_H_
