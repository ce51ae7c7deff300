// Enrollment: how a worker without a certificate gets its own (WorkerRegistry.Enroll). Contract:
// enrollment.h.
#include "services/coordinator/api/enrollment.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "services/common/security/auth.h"

namespace lockstep {
namespace {

std::array<unsigned char, 32> Digest(absl::string_view token) {
  std::array<unsigned char, 32> d;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), d.data());
  return d;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Enrollment>> Enrollment::Load(const std::string& ca_file,
                                                             const std::string& ca_key_file,
                                                             const std::string& tokens_file,
                                                             absl::Duration validity) {
  absl::StatusOr<WorkerSigner> signer = WorkerSigner::Load(ca_file, ca_key_file, validity);
  if (!signer.ok()) return signer.status();
  std::ifstream in(tokens_file);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--bootstrap_token_file: cannot read ", tokens_file));
  }
  std::vector<std::array<unsigned char, 32>> digests;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const absl::string_view token = absl::StripAsciiWhitespace(line);
    if (token.empty()) continue;
    if (token.size() < 16) {
      return absl::InvalidArgumentError(
          absl::StrCat(tokens_file, ":", n, ": a bootstrap token has at least 16 characters"));
    }
    digests.push_back(Digest(token));
  }
  if (digests.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(tokens_file, ": no bootstrap token"));
  }
  return std::unique_ptr<Enrollment>(new Enrollment(*std::move(signer), std::move(digests)));
}

std::string Enrollment::IdentityPrefix(absl::string_view name) {
  std::string out;
  for (char c : name.substr(0, 40)) {
    out.push_back(absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-' ? c : '-');
  }
  return out.empty() ? "worker" : out;
}

absl::StatusOr<v1::EnrollResponse> Enrollment::Enroll(absl::string_view authorization,
                                                      const v1::EnrollRequest& request) const {
  constexpr absl::string_view kBearer = "Bearer ";
  bool known = false;
  if (authorization.substr(0, kBearer.size()) == kBearer) {
    const auto d = Digest(authorization.substr(kBearer.size()));
    for (const auto& e : digests_) {  // no early exit: the time says nothing about the file
      if (CRYPTO_memcmp(e.data(), d.data(), d.size()) == 0) known = true;
    }
  }
  if (!known) {
    return absl::UnauthenticatedError(
        "enrolling a worker needs a bootstrap token (the worker's --bootstrap_token_file)");
  }
  // 64 random bits: a fresh identity, never one a worker already holds.
  const std::string identity = absl::StrCat(IdentityPrefix(request.name()), "-", RandomHex(8));
  absl::StatusOr<std::string> cert = signer_.Sign(request.csr_pem(), identity);
  if (!cert.ok()) return cert.status();
  v1::EnrollResponse resp;
  resp.set_certificate_pem(*cert);
  resp.set_identity(identity);
  return resp;
}

}  // namespace lockstep
