// Enrollment: how a worker without a certificate gets its own (WorkerRegistry.Enroll). It
// proves it may join with a bootstrap token (a file of tokens, one a line, at least 16
// characters; kept as SHA-256 digests, compared in constant time) and sends a CSR for a key
// it made itself (RSA of 2048 bits or more, or EC P-256 or larger); the coordinator signs it
// with the CA key (WorkerSigner) for a fresh identity NAME-<16 random hex digits>, never
// given twice, where NAME is the requested name shortened to fit a certificate's CN (a long
// name's first characters and a hash of it); the full name goes into the certificate too
// (a SAN, urn:lockstep:worker-name:NAME). The bootstrap token lets its
// holder add workers, never act as an existing one; revoking (WorkerPool::Revoke) ends one,
// and what it adds waits for an admin's approval unless a policy covers it (the caller's
// `admit`: WorkerPool::RecordEnrolled). Tokens may expire (expires=TIME in the file,
// bootstrap_tokens.h), and the file is read again whenever it changes, so that a token is
// rotated alone, without a restart. Thread-safe.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_API_ENROLLMENT_H_
#define LOCKSTEP_SERVICES_COORDINATOR_API_ENROLLMENT_H_

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/clock.h"
#include "lockstep/v1/registry.pb.h"
#include "services/common/security/credentials.h"

namespace lockstep {

class Enrollment {
 public:
  // INVALID_ARGUMENT naming the tokens file when it cannot be read or parsed
  // (ParseBootstrapTokens); the signer's errors for the CA files. Expiries are judged on
  // `clock` (not owned; it must outlive the Enrollment).
  static absl::StatusOr<std::unique_ptr<Enrollment>> Load(const std::string& ca_file,
                                                          const std::string& ca_key_file,
                                                          const std::string& tokens_file,
                                                          absl::Duration validity,
                                                          Clock* clock = Clock::Real());

  // `authorization`: the call's "authorization" header. UNAUTHENTICATED without a
  // bootstrap token or with an expired one; Sign's INVALID_ARGUMENT for a bad CSR; then
  // `admit`'s error, if any, for the identity about to be issued and its prefix (the
  // caller's policy: a revoked worker's name, the record of what it issues): only an
  // identity it admits is returned.
  using Admit = std::function<absl::Status(const std::string& identity, const std::string& prefix)>;
  // A tokens file that changed to one that does not parse refuses every enrollment
  // (UNAVAILABLE naming it) until it is fixed.
  absl::StatusOr<v1::EnrollResponse> Enroll(absl::string_view authorization,
                                            const v1::EnrollRequest& request,
                                            const Admit& admit = nullptr);

  // The identity's prefix made from a requested name: [A-Za-z0-9._-] kept, anything else
  // '-', "worker" if nothing is left; at most 31 characters, so that the identity's CN fits
  // X.509's 64: a longer name becomes its first 22 characters, '-' and 8 hex digits of
  // its SHA-256.
  static std::string IdentityPrefix(absl::string_view name);

 private:
  struct Token {
    std::array<unsigned char, 32> digest;
    std::optional<absl::Time> expires;
  };
  Enrollment(WorkerSigner signer, std::string tokens_file, Clock* clock)
      : signer_(std::move(signer)), tokens_file_(std::move(tokens_file)), clock_(clock) {}
  // Reads the tokens file again if it changed since (its size, mtime or inode).
  absl::Status Refresh() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerSigner signer_;
  const std::string tokens_file_;
  Clock* const clock_;
  absl::Mutex mu_;
  std::vector<Token> tokens_ ABSL_GUARDED_BY(mu_);
  std::string stamp_ ABSL_GUARDED_BY(mu_);    // the file's size, mtime and inode when read
  absl::Status broken_ ABSL_GUARDED_BY(mu_);  // why the file as it is now cannot be used
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_API_ENROLLMENT_H_
