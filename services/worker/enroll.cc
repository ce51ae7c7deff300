// Enroll: a worker's own certificate without an operator issuing one. Contract: enroll.h.
#include "services/worker/enroll.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lockstep/v1/registry.grpc.pb.h"
#include "services/common/rpc/status.h"
#include "services/common/security/credentials.h"

namespace lockstep {

absl::StatusOr<TlsFiles> EnsureEnrolled(const EnrollOptions& o) {
  namespace fs = std::filesystem;
  const TlsFiles files{o.ca_file, (fs::path(o.identity_dir) / "worker.pem").string(),
                       (fs::path(o.identity_dir) / "worker-key.pem").string()};
  if (fs::exists(files.key)) {
    absl::StatusOr<absl::Time> expiry = CertificateExpiry(files.cert);
    if (expiry.ok() && *expiry > absl::Now() + absl::Hours(1)) return files;
  }
  std::ifstream in(o.token_file);
  std::string token;
  for (std::string line; token.empty() && std::getline(in, line);) {
    token = std::string(absl::StripAsciiWhitespace(line));
  }
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--bootstrap_token_file: no token in ", o.token_file));
  }
  absl::StatusOr<Transport> transport = Transport::Tls({o.ca_file, "", ""});
  if (!transport.ok()) return transport.status();
  absl::StatusOr<KeyAndCsr> made = NewWorkerKeyAndCsr();
  if (!made.ok()) return made.status();

  auto stub = v1::WorkerRegistry::NewStub(
      MakeChannel(o.coordinator, *transport, kCoordinatorIdentity, token));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + o.timeout));
  ctx.set_wait_for_ready(true);  // the coordinator may be starting too
  CancelToken::Callback on_cancel;
  if (o.cancel != nullptr) on_cancel = o.cancel->OnCancel([&ctx] { ctx.TryCancel(); });
  spdlog::info("enrolling with {} (bootstrap token from {})", o.coordinator, o.token_file);
  v1::EnrollRequest req;
  req.set_csr_pem(made->csr_pem);
  req.set_name(o.name);
  v1::EnrollResponse resp;
  if (absl::Status st = FromGrpcStatus(stub->Enroll(&ctx, req, &resp)); !st.ok()) {
    if (o.cancel != nullptr && o.cancel->cancelled()) return o.cancel->status();
    return absl::Status(st.code(),
                        absl::StrCat("enrolling with ", o.coordinator, ": ", st.message()));
  }
  std::error_code ec;
  fs::create_directories(o.identity_dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(o.identity_dir, ": ", ec.message()));
  fs::permissions(o.identity_dir, fs::perms::owner_all, ec);
  if (absl::Status st = WritePrivateFile(files.key, made->key_pem); !st.ok()) return st;
  if (absl::Status st = WritePrivateFile(files.cert, resp.certificate_pem()); !st.ok()) return st;
  spdlog::info("enrolled as worker identity {} (certificate in {})", resp.identity(), files.cert);
  return files;
}

}  // namespace lockstep
