// A cluster's credentials, made once and kept in a folder (mode 0700, files 0600): the CA, the
// servers' and workers' certificates and the users' tokens. Contract: credentials.h.
#include "services/common/security/credentials.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "services/common/security/auth.h"
#include "services/common/security/private_files.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;

constexpr long kDay = 24 * 3600;

absl::Status OpenSslError(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, " failed (OpenSSL)"));
}

bool IsIp(const std::string& s) {
  in6_addr a;
  return inet_pton(AF_INET, s.c_str(), &a) == 1 || inet_pton(AF_INET6, s.c_str(), &a) == 1;
}

std::string Path(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Pem(const Cert& cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert.get());
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string Pem(const Key& key) {
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return OpenSslError(absl::StrCat("extension ", OBJ_nid2sn(nid), "=", value));
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok == 1 ? absl::OkStatus() : OpenSslError("X509_add_ext");
}

struct Issued {
  Cert cert;
  Key key;
};

// A certificate for `cn` with a fresh P-256 key (or for `public_key`, then `key` stays
// null), signed by (ca, ca_key), or self-signed as a CA when ca is null. `names`: the
// subjectAltName entries (DNS or IP) of a leaf. Valid for `seconds`.
absl::StatusOr<Issued> Issue(const std::string& cn, const std::vector<std::string>& names, X509* ca,
                             EVP_PKEY* ca_key, long seconds, EVP_PKEY* public_key = nullptr) {
  Issued out{Cert(X509_new()), Key(public_key == nullptr ? EVP_EC_gen("P-256") : nullptr)};
  X509* x = out.cert.get();
  if (x == nullptr || (public_key == nullptr && !out.key)) return OpenSslError("key generation");
  EVP_PKEY* subject_key = public_key != nullptr ? public_key : out.key.get();
  X509_set_version(x, 2);
  std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>> serial(BN_new());
  BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY);
  BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(x));
  X509_gmtime_adj(X509_getm_notBefore(x), -kDay);  // clocks in a cluster disagree a little
  X509_gmtime_adj(X509_getm_notAfter(x), seconds);
  X509_set_pubkey(x, subject_key);
  X509_NAME* subject = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("Lockstep"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* issuer = ca != nullptr ? ca : x;
  X509_set_issuer_name(x, X509_get_subject_name(issuer));
  std::vector<std::pair<int, std::string>> ext = {{NID_subject_key_identifier, "hash"}};
  if (ca == nullptr) {
    ext.push_back({NID_basic_constraints, "critical,CA:TRUE,pathlen:0"});
    ext.push_back({NID_key_usage, "critical,keyCertSign,cRLSign"});
  } else {
    std::vector<std::string> san;
    for (const std::string& n : names) {
      san.push_back(absl::StrCat(IsIp(n) ? "IP:" : "DNS:", n));
    }
    ext.push_back({NID_basic_constraints, "critical,CA:FALSE"});
    ext.push_back({NID_key_usage, "critical,digitalSignature,keyEncipherment"});
    ext.push_back({NID_ext_key_usage, "serverAuth,clientAuth"});
    ext.push_back({NID_authority_key_identifier, "keyid"});
    ext.push_back({NID_subject_alt_name, absl::StrJoin(san, ",")});
  }
  for (const auto& [nid, value] : ext) {
    if (absl::Status st = AddExtension(x, issuer, nid, value); !st.ok()) return st;
  }
  if (X509_sign(x, ca_key != nullptr ? ca_key : subject_key, EVP_sha256()) == 0) {
    return OpenSslError("X509_sign");
  }
  return out;
}

absl::StatusOr<Cert> LoadCert(const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFile(path);
  if (!pem.ok()) return pem.status();
  Bio bio(BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())));
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return absl::InvalidArgumentError(absl::StrCat(path, ": not a PEM certificate"));
  return cert;
}

absl::StatusOr<Key> LoadKey(const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFile(path);
  if (!pem.ok()) return pem.status();
  Bio bio(BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())));
  Key key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return absl::InvalidArgumentError(absl::StrCat(path, ": not a PEM private key"));
  return key;
}

// Issues `cn`'s certificate into NAME.pem and NAME-key.pem unless both exist.
absl::Status EnsureLeaf(const std::string& dir, const std::string& name, const std::string& cn,
                        const std::vector<std::string>& names, X509* ca, EVP_PKEY* ca_key) {
  const std::string cert = Path(dir, name + ".pem"), key = Path(dir, name + "-key.pem");
  if (fs::exists(cert) && fs::exists(key)) return absl::OkStatus();
  absl::StatusOr<Issued> issued = Issue(cn, names, ca, ca_key, 5 * 365 * kDay);
  if (!issued.ok()) return issued.status();
  if (absl::Status st = WritePrivate(key, Pem(issued->key)); !st.ok()) return st;
  return WritePrivate(cert, Pem(issued->cert));
}

std::string Pem(X509_REQ* req) {
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509_REQ(bio.get(), req);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

}  // namespace

absl::StatusOr<KeyAndCsr> NewWorkerKeyAndCsr() {
  Key key(EVP_EC_gen("P-256"));
  std::unique_ptr<X509_REQ, Deleter<X509_REQ, X509_REQ_free>> req(X509_REQ_new());
  if (!key || !req) return OpenSslError("key generation");
  X509_REQ_set_version(req.get(), 0);
  X509_NAME_add_entry_by_txt(X509_REQ_get_subject_name(req.get()), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(kWorkerIdentity), -1, -1, 0);
  if (X509_REQ_set_pubkey(req.get(), key.get()) != 1 ||
      X509_REQ_sign(req.get(), key.get(), EVP_sha256()) == 0) {
    return OpenSslError("X509_REQ_sign");
  }
  return KeyAndCsr{Pem(key), Pem(req.get())};
}

absl::StatusOr<WorkerSigner> WorkerSigner::Load(const std::string& ca_file,
                                                const std::string& ca_key_file,
                                                absl::Duration validity) {
  absl::StatusOr<std::string> ca = ReadFile(ca_file);
  if (!ca.ok()) return ca.status();
  absl::StatusOr<std::string> key = ReadFile(ca_key_file);
  if (!key.ok()) return key.status();
  // Loaded once here, so that a bad file stops the start rather than an enrollment.
  if (absl::StatusOr<Cert> c = LoadCert(ca_file); !c.ok()) return c.status();
  if (absl::StatusOr<Key> k = LoadKey(ca_key_file); !k.ok()) return k.status();
  return WorkerSigner(*std::move(ca), *std::move(key), validity);
}

absl::StatusOr<std::string> WorkerSigner::Sign(const std::string& csr_pem,
                                               const std::string& identity) const {
  Bio csr_bio(BIO_new_mem_buf(csr_pem.data(), static_cast<int>(csr_pem.size())));
  std::unique_ptr<X509_REQ, Deleter<X509_REQ, X509_REQ_free>> req(
      PEM_read_bio_X509_REQ(csr_bio.get(), nullptr, nullptr, nullptr));
  if (!req) return absl::InvalidArgumentError("csr_pem: not a PEM certificate request");
  Key public_key(X509_REQ_get_pubkey(req.get()));
  // The request is signed with the key it names: its sender holds that key.
  if (!public_key || X509_REQ_verify(req.get(), public_key.get()) != 1) {
    return absl::InvalidArgumentError("csr_pem: its signature does not verify");
  }
  Bio ca_bio(BIO_new_mem_buf(ca_pem_.data(), static_cast<int>(ca_pem_.size())));
  Cert ca(PEM_read_bio_X509(ca_bio.get(), nullptr, nullptr, nullptr));
  Bio key_bio(BIO_new_mem_buf(ca_key_pem_.data(), static_cast<int>(ca_key_pem_.size())));
  Key ca_key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!ca || !ca_key) return OpenSslError("loading the CA");
  // Whatever the request's subject says, the certificate names the identity given.
  absl::StatusOr<Issued> issued =
      Issue(absl::StrCat(kWorkerCnPrefix, identity), {kWorkerIdentity}, ca.get(), ca_key.get(),
            static_cast<long>(absl::ToInt64Seconds(validity_)), public_key.get());
  if (!issued.ok()) return issued.status();
  return Pem(issued->cert);
}

absl::StatusOr<absl::Time> CertificateExpiry(const std::string& cert_file) {
  absl::StatusOr<Cert> cert = LoadCert(cert_file);
  if (!cert.ok()) return cert.status();
  tm t = {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert->get()), &t) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(cert_file, ": no valid expiry"));
  }
  return absl::FromTM(t, absl::UTCTimeZone());
}

absl::Status WritePrivateFile(const std::string& path, const std::string& data) {
  return WritePrivate(path, data);
}

TlsFiles CoordinatorTls(const std::string& dir) {
  return {Path(dir, "ca.pem"), Path(dir, "coordinator.pem"), Path(dir, "coordinator-key.pem")};
}
TlsFiles WorkerTls(const std::string& dir, const std::string& worker) {
  return {Path(dir, "ca.pem"), Path(dir, absl::StrCat("workers/", worker, ".pem")),
          Path(dir, absl::StrCat("workers/", worker, "-key.pem"))};
}
TlsFiles ClientTls(const std::string& dir) { return {Path(dir, "ca.pem"), "", ""}; }
std::string TokensFile(const std::string& dir) { return Path(dir, "tokens"); }
std::string BootstrapTokenFile(const std::string& dir) { return Path(dir, "bootstrap-token"); }
std::string CaKeyFile(const std::string& dir) { return Path(dir, "ca-key.pem"); }
std::string TokenFile(const std::string& dir, const std::string& user) {
  return Path(dir, user + ".token");
}

namespace {

// The body of MakeCredentials, with the folder's lock held.
absl::Status MakeCredentialsLocked(const CredentialsOptions& options) {
  const std::string& dir = options.dir;
  std::error_code ec;
  const std::string ca_pem = Path(dir, "ca.pem"), ca_key_pem = Path(dir, "ca-key.pem");
  if (!fs::exists(ca_pem) || !fs::exists(ca_key_pem)) {
    absl::StatusOr<Issued> ca = Issue("Lockstep cluster CA", {}, nullptr, nullptr, 10 * 365 * kDay);
    if (!ca.ok()) return ca.status();
    // A new CA makes the old leaves worthless: they are issued again below.
    for (const char* name : {"coordinator", "worker"}) {
      fs::remove(Path(dir, absl::StrCat(name, ".pem")), ec);
    }
    fs::remove_all(Path(dir, "workers"), ec);
    if (absl::Status st = WritePrivate(ca_key_pem, Pem(ca->key)); !st.ok()) return st;
    if (absl::Status st = WritePrivate(ca_pem, Pem(ca->cert)); !st.ok()) return st;
  }
  absl::StatusOr<Cert> ca = LoadCert(ca_pem);
  if (!ca.ok()) return ca.status();
  absl::StatusOr<Key> ca_key = LoadKey(ca_key_pem);
  if (!ca_key.ok()) return ca_key.status();

  std::vector<std::string> coordinator_names = {kCoordinatorIdentity, "localhost", "127.0.0.1"};
  coordinator_names.insert(coordinator_names.end(), options.hosts.begin(), options.hosts.end());
  if (absl::Status st = EnsureLeaf(dir, "coordinator", kCoordinatorIdentity, coordinator_names,
                                   ca->get(), ca_key->get());
      !st.ok()) {
    return st;
  }
  if (!options.workers.empty()) {
    fs::create_directories(Path(dir, "workers"), ec);
    if (ec)
      return absl::PermissionDeniedError(absl::StrCat(Path(dir, "workers"), ": ", ec.message()));
    fs::permissions(Path(dir, "workers"), fs::perms::owner_all, ec);
  }
  for (const std::string& worker : options.workers) {
    if (absl::Status st =
            EnsureLeaf(dir, absl::StrCat("workers/", worker), absl::StrCat(kWorkerCnPrefix, worker),
                       {kWorkerIdentity}, ca->get(), ca_key->get());
        !st.ok()) {
      return st;
    }
  }

  // The bootstrap token with which workers enroll (coordinator --bootstrap_token_file).
  if (!fs::exists(BootstrapTokenFile(dir))) {
    if (absl::Status st = WritePrivate(BootstrapTokenFile(dir), RandomHex(32) + "\n"); !st.ok()) {
      return st;
    }
  }

  // Tokens: one per caller, each in its own file; the tokens file lists them all.
  std::string table;
  if (absl::StatusOr<std::string> old = ReadFile(TokensFile(dir)); old.ok()) table = *old;
  std::vector<std::pair<std::string, std::string>> callers = {{"admin", "admin"}};
  for (const std::string& u : options.users) callers.push_back({u, "user"});
  bool changed = false;
  for (const auto& [name, role] : callers) {
    const std::string file = TokenFile(dir, name);
    absl::StatusOr<std::string> token = ReadFile(file);
    if (token.ok() && absl::StrContains(table, *token)) continue;
    const std::string fresh = RandomHex(32);
    if (absl::Status st = WritePrivate(file, fresh); !st.ok()) return st;
    absl::StrAppend(&table, fresh, " ", name, " ", role, "\n");
    changed = true;
  }
  if (changed) {
    if (absl::Status st = WritePrivate(TokensFile(dir), table); !st.ok()) return st;
  }
  return TokenTable::Load(TokensFile(dir)).status();
}

}  // namespace

absl::Status MakeCredentials(const CredentialsOptions& options) {
  const std::string& dir = options.dir;
  for (const std::string& user : options.users) {
    if (user == "admin" || absl::StrContains(user, "/") ||
        !TokenTable::Parse(absl::StrCat(std::string(16, 'x'), " ", user, " user"), "").ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("user name '", user, "': 1 to 64 characters of [A-Za-z0-9._@-], not admin"));
    }
  }
  for (const std::string& worker : options.workers) {
    if (!ValidWorkerName(worker)) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker name '", worker, "': 1 to 64 characters of [A-Za-z0-9._-]"));
    }
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(dir, ": ", ec.message()));
  fs::permissions(dir, fs::perms::owner_all, ec);
  // Two processes making the same folder at once (two `cluster up`, or test processes
  // under ctest -j) would otherwise interleave two CAs' files: one makes, the other waits
  // and then finds the folder complete. The lock goes with the descriptor.
  const std::string lock_file = Path(dir, ".lock");
  const int fd = open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat(lock_file, ": ", strerror(errno)));
  int locked;
  do locked = flock(fd, LOCK_EX);
  while (locked != 0 && errno == EINTR);
  absl::Status st = locked == 0
                        ? MakeCredentialsLocked(options)
                        : absl::InternalError(absl::StrCat(lock_file, ": ", strerror(errno)));
  close(fd);
  return st;
}

absl::StatusOr<std::string> KubernetesSecrets(const std::string& dir, const std::string& ns,
                                              const std::vector<std::string>& workers) {
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> secrets = {
      {"lockstep-coordinator-tls",
       {{"ca.pem", "ca.pem"},
        {"tls.pem", "coordinator.pem"},
        {"tls-key.pem", "coordinator-key.pem"},
        {"tokens", "tokens"},
        {"ca-key.pem", "ca-key.pem"},
        {"bootstrap-token", "bootstrap-token"}}},
      {"lockstep-worker-bootstrap", {{"ca.pem", "ca.pem"}, {"bootstrap-token", "bootstrap-token"}}},
  };
  for (const std::string& w : workers) {
    secrets.push_back({absl::StrCat("lockstep-worker-", w, "-tls"),
                       {{"ca.pem", "ca.pem"},
                        {"tls.pem", absl::StrCat("workers/", w, ".pem")},
                        {"tls-key.pem", absl::StrCat("workers/", w, "-key.pem")}}});
  }
  std::string out = "# Made by `lockstep certs`: the cluster's CA, certificates and tokens.\n";
  for (const auto& [name, files] : secrets) {
    absl::StrAppend(&out, "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: ", name,
                    "\n  namespace: ", ns, "\n  labels:\n    app.kubernetes.io/part-of: lockstep\n",
                    "type: Opaque\ndata:\n");
    for (const auto& [key, file] : files) {
      absl::StatusOr<std::string> data = ReadFile(Path(dir, file));
      if (!data.ok()) return data.status();
      absl::StrAppend(&out, "  ", key, ": ", absl::Base64Escape(*data), "\n");
    }
  }
  return out;
}

}  // namespace lockstep
