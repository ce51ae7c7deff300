// Tests of Enrollment: bootstrap tokens, CSRs signed into certificates for fresh
// identities (checked with OpenSSL: CN, the worker's own key, the CA's signature), and the
// refusals.
#include "services/coordinator/api/enrollment.h"

#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fstream>
#include <set>

#include "core/testing.h"
#include "services/common/security/auth.h"
#include "services/common/security/credentials.h"

namespace lockstep::testing {
namespace {

using ::testing::_;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kToken[] = "bootstrap-0123456789abcdef";

std::string Dir() {
  static const std::string* dir = [] {
    auto* d = new std::string(::testing::TempDir() + "/enrollment-credentials");
    if (!MakeCredentials({*d, {}, {}}).ok()) std::abort();
    std::ofstream(*d + "/bootstrap-tokens") << "\n" << kToken << "\n";
    return d;
  }();
  return *dir;
}

std::unique_ptr<Enrollment> Load() {
  auto e = Enrollment::Load(Dir() + "/ca.pem", Dir() + "/ca-key.pem", Dir() + "/bootstrap-tokens",
                            absl::Hours(2));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
std::unique_ptr<X509, X509Free> ParseCert(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return std::unique_ptr<X509, X509Free>(x);
}

TEST(Enrollment, ABootstrapTokenGetsTheWorkersOwnKeySignedForAFreshIdentity) {
  auto enrollment = Load();
  ASSERT_NE(enrollment, nullptr);
  ASSERT_OK_AND_ASSIGN(KeyAndCsr made, NewWorkerKeyAndCsr());
  v1::EnrollRequest req;
  req.set_csr_pem(made.csr_pem);
  req.set_name("lockstep-worker-3");
  ASSERT_OK_AND_ASSIGN(v1::EnrollResponse resp,
                       enrollment->Enroll(absl::StrCat("Bearer ", kToken), req));
  EXPECT_THAT(resp.identity(), StartsWith("lockstep-worker-3-"));
  EXPECT_TRUE(ValidWorkerName(resp.identity()));
  auto cert = ParseCert(resp.certificate_pem());
  ASSERT_NE(cert, nullptr);
  char cn[256] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName, cn, sizeof(cn));
  EXPECT_EQ(std::string(cn), absl::StrCat(kWorkerCnPrefix, resp.identity()));
  // For the key the worker made, signed by the cluster's CA, short-lived.
  BIO* bio = BIO_new_mem_buf(made.key_pem.data(), static_cast<int>(made.key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  EXPECT_EQ(X509_check_private_key(cert.get(), key), 1);
  EVP_PKEY_free(key);
  std::ifstream ca_in(Dir() + "/ca.pem");
  auto ca = ParseCert(std::string(std::istreambuf_iterator<char>(ca_in), {}));
  EXPECT_EQ(X509_verify(cert.get(), X509_get0_pubkey(ca.get())), 1);
  const std::string file = ::testing::TempDir() + "/enrolled.pem";
  ASSERT_OK(WritePrivateFile(file, resp.certificate_pem()));
  ASSERT_OK_AND_ASSIGN(absl::Time expiry, CertificateExpiry(file));
  EXPECT_LT(expiry, absl::Now() + absl::Hours(2) + absl::Minutes(1));
  EXPECT_GT(expiry, absl::Now() + absl::Hours(1));

  // The same name again: another identity, never the first one's.
  ASSERT_OK_AND_ASSIGN(v1::EnrollResponse again,
                       enrollment->Enroll(absl::StrCat("Bearer ", kToken), req));
  EXPECT_NE(again.identity(), resp.identity());
}

// The caller's policy sees the name after the token and the CSR are good (a bad CSR
// records nothing), and what it refuses is not issued.
TEST(Enrollment, WhatTheAdmitPolicyRefusesIsNotIssued) {
  auto enrollment = Load();
  ASSERT_NE(enrollment, nullptr);
  ASSERT_OK_AND_ASSIGN(KeyAndCsr made, NewWorkerKeyAndCsr());
  v1::EnrollRequest req;
  req.set_csr_pem(made.csr_pem);
  req.set_name("gpu 7");
  std::vector<std::string> asked;
  const auto refuse = [&](const std::string&, const std::string& prefix) {
    asked.push_back(prefix);
    return absl::PermissionDeniedError("revoked name " + prefix);
  };
  EXPECT_THAT(enrollment->Enroll("Bearer wrong-token-0123456789", req, refuse),
              StatusIs(absl::StatusCode::kUnauthenticated, _));
  EXPECT_TRUE(asked.empty());  // nothing is told to a caller without a token
  v1::EnrollRequest bad = req;
  bad.set_csr_pem("not a CSR");
  EXPECT_THAT(enrollment->Enroll(absl::StrCat("Bearer ", kToken), bad, refuse),
              StatusIs(absl::StatusCode::kInvalidArgument, _));
  EXPECT_TRUE(asked.empty());
  EXPECT_THAT(enrollment->Enroll(absl::StrCat("Bearer ", kToken), req, refuse),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("revoked name gpu-7")));
  EXPECT_THAT(asked, ::testing::ElementsAre("gpu-7"));
}

// A token may expire, and the file is read again when it changes: a token is rotated alone,
// the coordinator running on; a file broken meanwhile refuses everyone until it is fixed.
TEST(Enrollment, TokensExpireAndAreRotatedWithoutARestart) {
  const ScratchDir dir("bootstrap-tokens");
  const std::string file = (dir.path() / "bootstrap-tokens").string();
  const std::string old_token = "old-token-0123456789abcdef",
                    new_token = "new-token-0123456789abcdef";
  std::ofstream(file) << old_token << " expires=2030-01-01T00:00:00Z\n";
  SimulatedClock clock(
      absl::FromCivil(absl::CivilSecond(2029, 12, 31, 23, 0, 0), absl::UTCTimeZone()));
  ASSERT_OK_AND_ASSIGN(auto enrollment, Enrollment::Load(Dir() + "/ca.pem", Dir() + "/ca-key.pem",
                                                         file, absl::Hours(1), &clock));
  ASSERT_OK_AND_ASSIGN(KeyAndCsr made, NewWorkerKeyAndCsr());
  v1::EnrollRequest req;
  req.set_csr_pem(made.csr_pem);
  req.set_name("w");
  const auto enroll = [&](const std::string& token) {
    return enrollment->Enroll(absl::StrCat("Bearer ", token), req).status();
  };
  EXPECT_OK(enroll(old_token));
  clock.Advance(absl::Hours(1));
  EXPECT_THAT(enroll(old_token),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("expired at 2030-01-01")));
  // Rotated: the new token first, the old one gone.
  std::ofstream(file) << new_token << "\n";
  EXPECT_OK(enroll(new_token));
  EXPECT_THAT(enroll(old_token), StatusIs(absl::StatusCode::kUnauthenticated, _));
  std::ofstream(file) << "short\n";
  EXPECT_THAT(enroll(new_token), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("broken")));
  std::ofstream(file) << new_token << " # fixed\n";
  EXPECT_OK(enroll(new_token));
}

TEST(Enrollment, WithoutTheBootstrapTokenNothingIsSigned) {
  auto enrollment = Load();
  ASSERT_NE(enrollment, nullptr);
  ASSERT_OK_AND_ASSIGN(KeyAndCsr made, NewWorkerKeyAndCsr());
  v1::EnrollRequest req;
  req.set_csr_pem(made.csr_pem);
  for (const char* auth : {"", "Bearer wrong-token-0123456789", kToken}) {
    EXPECT_THAT(enrollment->Enroll(auth, req),
                StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("bootstrap token")));
  }
}

TEST(Enrollment, ACsrThatIsNotPemOrWhoseSignatureFailsIsInvalidArgument) {
  auto enrollment = Load();
  ASSERT_NE(enrollment, nullptr);
  v1::EnrollRequest req;
  req.set_csr_pem("not a csr");
  EXPECT_THAT(enrollment->Enroll(absl::StrCat("Bearer ", kToken), req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("csr_pem")));
  // Another key's request with this one's signature: the sender does not hold the key.
  ASSERT_OK_AND_ASSIGN(KeyAndCsr a, NewWorkerKeyAndCsr());
  std::string pem = a.csr_pem;
  const size_t end = pem.find("-----END");
  ASSERT_NE(end, std::string::npos);
  pem[end - 10] = pem[end - 10] == 'A' ? 'B' : 'A';  // inside the signature's base64
  req.set_csr_pem(pem);
  EXPECT_THAT(enrollment->Enroll(absl::StrCat("Bearer ", kToken), req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("csr_pem")));
}

TEST(Enrollment, TheIdentityPrefixKeepsOnlyNameCharacters) {
  EXPECT_EQ(Enrollment::IdentityPrefix("pod/7 x"), "pod-7-x");
  EXPECT_EQ(Enrollment::IdentityPrefix(""), "worker");
  EXPECT_EQ(Enrollment::IdentityPrefix(std::string(100, 'a')).size(), 31u);
}

std::string CommonName(X509* cert) {
  char cn[256] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
  return cn;
}

// The URI entries of the certificate's subjectAltName.
std::vector<std::string> Uris(X509* cert) {
  std::vector<std::string> out;
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type != GEN_URI) continue;
    out.emplace_back(
        reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.uniformResourceIdentifier)),
        ASN1_STRING_length(n->d.uniformResourceIdentifier));
  }
  GENERAL_NAMES_free(names);
  return out;
}

// Host names of 32 to 253 characters (a StatefulSet's pod in a long namespace): each gets
// a certificate with a CN (the first characters and a hash: two long names with the same
// start get different ones), the full name in a SAN.
TEST(Enrollment, ALongNameGetsAShortenedCnAndItsFullNameInASan) {
  auto enrollment = Load();
  ASSERT_NE(enrollment, nullptr);
  ASSERT_OK_AND_ASSIGN(KeyAndCsr made, NewWorkerKeyAndCsr());
  std::set<std::string> prefixes;
  for (const std::string& name :
       {std::string(32, 'w'), std::string(40, 'w') + "-0", std::string(40, 'w') + "-1",
        std::string("lockstep-worker-7.lockstep-workers.a-rather-long-namespace.svc.cluster.local"),
        std::string(253, 'h')}) {
    v1::EnrollRequest req;
    req.set_csr_pem(made.csr_pem);
    req.set_name(name);
    ASSERT_OK_AND_ASSIGN(v1::EnrollResponse resp,
                         enrollment->Enroll(absl::StrCat("Bearer ", kToken), req));
    EXPECT_TRUE(ValidWorkerName(resp.identity())) << resp.identity();
    auto cert = ParseCert(resp.certificate_pem());
    ASSERT_NE(cert, nullptr);
    EXPECT_EQ(CommonName(cert.get()), absl::StrCat(kWorkerCnPrefix, resp.identity())) << name;
    EXPECT_LE(CommonName(cert.get()).size(), 64u);
    EXPECT_THAT(Uris(cert.get()), ::testing::ElementsAre(absl::StrCat(kWorkerNameUrn, name)));
    prefixes.insert(resp.identity().substr(0, resp.identity().size() - 17));
  }
  EXPECT_EQ(prefixes.size(), 5u);
}

// A CSR for `key`, signed with it.
std::string CsrFor(EVP_PKEY* key) {
  X509_REQ* req = X509_REQ_new();
  X509_REQ_set_pubkey(req, key);
  X509_REQ_sign(req, key, EVP_sha256());
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509_REQ(bio, req);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  X509_REQ_free(req);
  return pem;
}

TEST(Enrollment, WeakKeysAreRefusedRsa2048AndP384Signed) {
  auto enrollment = Load();
  ASSERT_NE(enrollment, nullptr);
  struct Case {
    EVP_PKEY* key;
    bool signed_;
    const char* says;
  };
  const Case cases[] = {
      {EVP_RSA_gen(512), false, "RSA key of 512 bits"},
      {EVP_RSA_gen(1024), false, "RSA key of 1024 bits"},
      {EVP_EC_gen("secp224r1"), false, "curve 'secp224r1'"},
      {EVP_RSA_gen(2048), true, ""},
      {EVP_EC_gen("P-384"), true, ""},
  };
  for (const Case& c : cases) {
    ASSERT_NE(c.key, nullptr);
    v1::EnrollRequest req;
    req.set_csr_pem(CsrFor(c.key));
    req.set_name("w");
    const auto got = enrollment->Enroll(absl::StrCat("Bearer ", kToken), req);
    if (c.signed_) {
      EXPECT_OK(got);
    } else {
      EXPECT_THAT(got, StatusIs(absl::StatusCode::kInvalidArgument,
                                ::testing::AllOf(HasSubstr("csr_pem"), HasSubstr(c.says))));
    }
    EVP_PKEY_free(c.key);
  }
}

TEST(Enrollment, ABadTokensFileIsInvalidArgumentNamingIt) {
  const std::string file = ::testing::TempDir() + "/short-bootstrap-tokens";
  std::ofstream(file) << "short\n";
  EXPECT_THAT(Enrollment::Load(Dir() + "/ca.pem", Dir() + "/ca-key.pem", file, absl::Hours(1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(file + ":1")));
  const std::string empty = ::testing::TempDir() + "/empty-bootstrap-tokens";
  std::ofstream(empty) << "\n";
  EXPECT_THAT(Enrollment::Load(Dir() + "/ca.pem", Dir() + "/ca-key.pem", empty, absl::Hours(1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no bootstrap token")));
}

}  // namespace
}  // namespace lockstep::testing
