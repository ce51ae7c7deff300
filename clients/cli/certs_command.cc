// `lockstep certs`: a cluster's CA, certificates and tokens
// (services/common/security/credentials.h) for compose or Kubernetes; `lockstep cluster up` makes
// its own.
#include <cstdio>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/cli/commands.h"
#include "services/common/security/credentials.h"
#include "services/common/security/private_files.h"

namespace lockstep::cli {
namespace {

struct CertsOptions {
  CredentialsOptions credentials;
  std::string k8s_secrets;
  std::string k8s_namespace = "lockstep";
};

// --workers N (a count) is worker-0 ... worker-N-1; names are kept as they are.
std::vector<std::string> WorkerNames(const std::vector<std::string>& given) {
  int n = 0;
  if (given.size() != 1 || !absl::SimpleAtoi(given[0], &n) || n < 1) return given;
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(absl::StrCat("worker-", i));
  return names;
}

int Certs(CertsOptions o) {
  SetPrivateUmask();  // keys and tokens: the owner's only (the folder 0700, files 0600)
  const std::string& out = o.credentials.dir;
  o.credentials.workers = WorkerNames(o.credentials.workers);
  if (absl::Status st = MakeCredentials(o.credentials); !st.ok()) return Fail(st);
  absl::PrintF(
      "credentials in %s (kept if already there): ca.pem, coordinator.pem and its key; tokens "
      "(the coordinator's --tokens_file); admin.token",
      out);
  for (const std::string& u : o.credentials.users) absl::PrintF(", %s.token", u);
  for (const std::string& w : o.credentials.workers) {
    absl::PrintF(", workers/%s.pem and its key", w);
  }
  absl::PrintF("\n");
  if (!o.k8s_secrets.empty()) {
    absl::StatusOr<std::string> yaml =
        KubernetesSecrets(out, o.k8s_namespace, o.credentials.workers);
    if (!yaml.ok()) return Fail(yaml.status());
    // The coordinator's key and every token: 0600, also over an older, looser file.
    if (absl::Status st = WritePrivate(o.k8s_secrets, *yaml); !st.ok()) return Fail(st);
    absl::PrintF("Kubernetes Secrets in %s: kubectl apply -f %s\n", o.k8s_secrets, o.k8s_secrets);
  }
  return 0;
}

}  // namespace

void AddCertsCommand(CLI::App& app, Commands& out) {
  auto o = std::make_shared<CertsOptions>();
  o->credentials.dir = "lockstep-credentials";
  CLI::App* sub = app.add_subcommand(
      "certs", "make a cluster's CA, certificates and tokens (for compose, Kubernetes)");
  sub->add_option("--out", o->credentials.dir, "the folder to write them to");
  sub->add_option("--hosts", o->credentials.hosts,
                  "more names for the servers' certificates (comma-separated)")
      ->delimiter(',')
      ->type_name("NAME,...")
      ->default_str("");
  sub->add_option("--users", o->credentials.users, "users to make tokens for (comma-separated)")
      ->delimiter(',')
      ->type_name("NAME,...")
      ->default_str("");
  sub->add_option("--workers", o->credentials.workers,
                  "workers to issue their own certificates for: names, or a count N for "
                  "worker-0 ... worker-N-1 (comma-separated)")
      ->delimiter(',')
      ->type_name("NAME,...|N")
      ->default_str("");
  sub->add_option("--k8s-secrets", o->k8s_secrets, "also write them as Kubernetes Secrets here")
      ->type_name("FILE");
  sub->add_option("--namespace", o->k8s_namespace, "the Secrets' namespace");
  out.push_back({sub, [o] { return Certs(*o); }});
}

}  // namespace lockstep::cli
