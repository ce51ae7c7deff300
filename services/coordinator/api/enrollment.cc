// Enrollment: how a worker without a certificate gets its own (WorkerRegistry.Enroll). Contract:
// enrollment.h.
#include "services/coordinator/api/enrollment.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "services/common/security/auth.h"
#include "services/common/security/bootstrap_tokens.h"

namespace lockstep {
namespace {

std::array<unsigned char, 32> Digest(absl::string_view token) {
  std::array<unsigned char, 32> d;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), d.data());
  return d;
}

// kWorkerCnPrefix, the prefix, '-' and 16 hex digits: 64 characters, X.509's most for a CN.
constexpr size_t kMaxPrefix = 64 - (sizeof(kWorkerCnPrefix) - 1) - 17;

// [A-Za-z0-9._-] kept, anything else '-', at most a host name's 253 characters.
std::string SanitizedName(absl::string_view name) {
  std::string out;
  for (char c : name.substr(0, 253)) {
    out.push_back(absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-' ? c : '-');
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Enrollment>> Enrollment::Load(const std::string& ca_file,
                                                             const std::string& ca_key_file,
                                                             const std::string& tokens_file,
                                                             absl::Duration validity,
                                                             Clock* clock) {
  absl::StatusOr<WorkerSigner> signer = WorkerSigner::Load(ca_file, ca_key_file, validity);
  if (!signer.ok()) return signer.status();
  std::unique_ptr<Enrollment> e(new Enrollment(*std::move(signer), tokens_file, clock));
  absl::MutexLock lock(&e->mu_);
  if (absl::Status st = e->Refresh(); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--bootstrap_token_file: ", st.message()));
  }
  return e;
}

absl::Status Enrollment::Refresh() {
  struct stat st;
  if (stat(tokens_file_.c_str(), &st) != 0) {
    broken_ = absl::UnavailableError(absl::StrCat("cannot read ", tokens_file_));
    return broken_;
  }
  const std::string stamp =
      absl::StrCat(st.st_size, "/", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, "/", st.st_ino);
  if (stamp == stamp_) return broken_;
  std::ifstream in(tokens_file_);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<std::vector<BootstrapToken>> parsed =
      in ? ParseBootstrapTokens(text.str(), tokens_file_)
         : absl::UnavailableError(absl::StrCat("cannot read ", tokens_file_));
  stamp_ = stamp;
  if (!parsed.ok()) {
    broken_ = absl::UnavailableError(std::string(parsed.status().message()));
    return broken_;
  }
  tokens_.clear();
  for (const BootstrapToken& t : *parsed) tokens_.push_back({Digest(t.token), t.expires});
  broken_ = absl::OkStatus();
  return broken_;
}

std::string Enrollment::IdentityPrefix(absl::string_view name) {
  const std::string full = SanitizedName(name);
  if (full.empty()) return "worker";
  if (full.size() <= kMaxPrefix) return full;
  const auto d = Digest(full);
  return absl::StrCat(
      full.substr(0, kMaxPrefix - 9), "-",
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(d.data()), 4)));
}

absl::StatusOr<v1::EnrollResponse> Enrollment::Enroll(absl::string_view authorization,
                                                      const v1::EnrollRequest& request,
                                                      const Admit& admit) {
  constexpr absl::string_view kBearer = "Bearer ";
  const Token* known = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status st = Refresh(); !st.ok()) {
      spdlog::error("bootstrap tokens: {}: no worker enrolls until it is fixed",
                    std::string(st.message()));
      return absl::UnavailableError(
          "enrollment is unavailable: the coordinator's bootstrap "
          "token file is broken (its log says why)");
    }
    if (authorization.substr(0, kBearer.size()) == kBearer) {
      const auto d = Digest(authorization.substr(kBearer.size()));
      for (const Token& t : tokens_) {  // no early exit: the time says nothing about the file
        if (CRYPTO_memcmp(t.digest.data(), d.data(), d.size()) == 0) known = &t;
      }
    }
    if (known == nullptr) {
      return absl::UnauthenticatedError(
          "enrolling a worker needs a bootstrap token (the worker's --bootstrap_token_file)");
    }
    if (known->expires.has_value() && clock_->Now() >= *known->expires) {
      return absl::UnauthenticatedError(
          absl::StrCat("this bootstrap token expired at ",
                       absl::FormatTime(absl::RFC3339_sec, *known->expires, absl::UTCTimeZone()),
                       ": ask an admin for the current one"));
    }
  }
  const std::string prefix = IdentityPrefix(request.name());
  // 64 random bits: a fresh identity, never one a worker already holds.
  const std::string identity = absl::StrCat(prefix, "-", RandomHex(8));
  absl::StatusOr<std::string> cert =
      signer_.Sign(request.csr_pem(), identity, SanitizedName(request.name()));
  if (!cert.ok()) return cert.status();
  // Asked once the CSR is good, so that it records only identities it issues; what it
  // refuses is signed but never leaves this function.
  if (admit) {
    if (absl::Status st = admit(identity, prefix); !st.ok()) return st;
  }
  v1::EnrollResponse resp;
  resp.set_certificate_pem(*cert);
  resp.set_identity(identity);
  return resp;
}

}  // namespace lockstep
