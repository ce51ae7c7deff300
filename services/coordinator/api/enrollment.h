// Enrollment: how a worker without a certificate gets its own (WorkerRegistry.Enroll). It
// proves it may join with a bootstrap token (a file of tokens, one a line, at least 16
// characters; kept as SHA-256 digests, compared in constant time) and sends a CSR for a key
// it made itself; the coordinator signs it with the CA key (WorkerSigner) for a fresh
// identity NAME-<16 random hex digits>, never given twice. The bootstrap token lets its
// holder add workers, never act as an existing one; revoking (WorkerPool::Revoke) ends one.
// Immutable after Load; thread-safe.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_API_ENROLLMENT_H_
#define LOCKSTEP_SERVICES_COORDINATOR_API_ENROLLMENT_H_

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lockstep/v1/registry.pb.h"
#include "services/common/security/credentials.h"

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
  // bootstrap token; Sign's INVALID_ARGUMENT for a bad CSR.
  absl::StatusOr<v1::EnrollResponse> Enroll(absl::string_view authorization,
                                            const v1::EnrollRequest& request) const;

  // The identity's prefix made from a requested name: [A-Za-z0-9._-] kept, anything else
  // '-', at most 40 characters, "worker" if nothing is left.
  static std::string IdentityPrefix(absl::string_view name);

 private:
  Enrollment(WorkerSigner signer, std::vector<std::array<unsigned char, 32>> digests)
      : signer_(std::move(signer)), digests_(std::move(digests)) {}
  const WorkerSigner signer_;
  const std::vector<std::array<unsigned char, 32>> digests_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_API_ENROLLMENT_H_
