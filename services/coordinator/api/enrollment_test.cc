// Tests of Enrollment: bootstrap tokens, CSRs signed into certificates for fresh
// identities (checked with OpenSSL: CN, the worker's own key, the CA's signature), and the
// refusals.
#include "services/coordinator/api/enrollment.h"

#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>

#include "core/testing.h"
#include "services/common/security/auth.h"
#include "services/common/security/credentials.h"

namespace lockstep::testing {
namespace {

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
  EXPECT_EQ(Enrollment::IdentityPrefix(std::string(100, 'a')).size(), 40u);
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
