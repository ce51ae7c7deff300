// Tests of credentials.h: processes making one folder at once end with one CA that signed
// every certificate in it.
#include "services/common/security/credentials.h"

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/testing.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

// The first PEM object of `path` read with `read` (PEM_read_X509, PEM_read_PrivateKey).
template <typename T, typename Free>
std::unique_ptr<T, Free> ReadPem(const std::string& path,
                                 T* (*read)(FILE*, T**, pem_password_cb*, void*)) {
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) return nullptr;
  std::unique_ptr<T, Free> object(read(f, nullptr, nullptr, nullptr));
  fclose(f);
  return object;
}

std::unique_ptr<X509, X509Free> ReadCert(const std::string& path) {
  return ReadPem<X509, X509Free>(path, PEM_read_X509);
}

// `files`' certificate is signed by `ca` and its key is the certificate's.
void ExpectIssuedBy(const TlsFiles& files, X509* ca) {
  auto cert = ReadCert(files.cert);
  auto key = ReadPem<EVP_PKEY, KeyFree>(files.key, PEM_read_PrivateKey);
  ASSERT_NE(cert, nullptr) << files.cert;
  ASSERT_NE(key, nullptr) << files.key;
  EXPECT_EQ(X509_verify(cert.get(), X509_get0_pubkey(ca)), 1)
      << files.cert << " not signed by the CA";
  EXPECT_EQ(X509_check_private_key(cert.get(), key.get()), 1)
      << files.key << " is not " << files.cert << "'s key";
}

TEST(Credentials, MakersRacingOnOneFolderLeaveOneConsistentSet) {
  std::string templ = "/tmp/credentials_test.XXXXXX";
  ASSERT_NE(mkdtemp(templ.data()), nullptr);
  const std::string dir = templ + "/cluster";
  // Threads stand for processes: each MakeCredentials opens its own lock descriptor, and
  // flock excludes two descriptors in one process as in two.
  std::vector<absl::Status> results(6);
  std::vector<std::thread> makers;
  for (size_t i = 0; i < results.size(); ++i) {
    makers.emplace_back([&, i] {
      results[i] = MakeCredentials({dir, {}, {"alice"}, {"w0", "w1"}});
    });
  }
  for (std::thread& t : makers) t.join();
  for (const absl::Status& st : results) EXPECT_OK(st);

  auto ca = ReadCert(CoordinatorTls(dir).ca);
  ASSERT_NE(ca, nullptr);
  ExpectIssuedBy(CoordinatorTls(dir), ca.get());
  ExpectIssuedBy(WorkerTls(dir, "w0"), ca.get());
  ExpectIssuedBy(WorkerTls(dir, "w1"), ca.get());
  fs::remove_all(templ);
}

}  // namespace
}  // namespace lockstep::testing
