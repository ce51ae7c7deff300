// `lockstep certs`: a cluster's CA, certificates and tokens (services/common/credentials.h)
// for compose or Kubernetes; `lockstep cluster up` makes its own.
#include <cstdio>
#include <fstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "clients/cli/commands.h"
#include "services/common/credentials.h"

namespace lockstep::cli {

int CertsCommand(Args& args) {
  const std::string out = args.Value("out", "lockstep-credentials");
  const std::string hosts = args.Value("hosts", "");
  const std::string users = args.Value("users", "");
  const std::string k8s = args.Value("k8s-secrets", "");
  const std::string ns = args.Value("namespace", "lockstep");
  if (!args.Done() || !args.Positional().empty()) {
    absl::FPrintF(stderr,
                  "usage: lockstep certs [--out DIR] [--hosts NAME,...] [--users NAME,...]\n"
                  "                      [--k8s-secrets FILE [--namespace NS]]\n");
    return 2;
  }
  CredentialsOptions options;
  options.dir = out;
  options.hosts = absl::StrSplit(hosts, ',', absl::SkipEmpty());
  options.users = absl::StrSplit(users, ',', absl::SkipEmpty());
  if (absl::Status st = MakeCredentials(options); !st.ok()) return Fail(st);
  absl::PrintF(
      "credentials in %s (kept if already there): ca.pem, coordinator.pem, worker.pem and "
      "their keys; tokens (the coordinator's --tokens_file); admin.token",
      out);
  for (const std::string& u : options.users) absl::PrintF(", %s.token", u);
  absl::PrintF("\n");
  if (!k8s.empty()) {
    absl::StatusOr<std::string> yaml = KubernetesSecrets(out, ns);
    if (!yaml.ok()) return Fail(yaml.status());
    std::ofstream f(k8s);
    f << *yaml;
    if (!f.flush()) return Fail(absl::PermissionDeniedError("cannot write " + k8s));
    absl::PrintF("Kubernetes Secrets in %s: kubectl apply -f %s\n", k8s, k8s);
  }
  return 0;
}

}  // namespace lockstep::cli
