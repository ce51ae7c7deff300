// Where every server and channel gets its credentials and limits: one place. Contract: net.h.
#include "services/common/rpc/net.h"

#include <arpa/inet.h>
#include <grpcpp/health_check_service_interface.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "services/common/flags.h"
#include "services/common/rpc/listen_socket.h"

namespace lockstep {
namespace {

// Keepalive, both ends: a dead peer is noticed in seconds even on an idle connection.
constexpr std::pair<const char*, int> kKeepalive[] = {
    {GRPC_ARG_KEEPALIVE_TIME_MS, 10000},
    {GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000},
    {GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1},
};

}  // namespace

absl::StatusOr<Transport> Transport::Tls(const TlsFiles& files) {
  if (files.ca.empty()) {
    return absl::InvalidArgumentError("--tls_ca: the cluster's CA certificate is required");
  }
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  Transport t;
  t.secure_ = true;
  for (auto [flag, path, pem] :
       {std::tuple{"--tls_ca", &files.ca, &t.ca_}, std::tuple{"--tls_cert", &files.cert, &t.cert_},
        std::tuple{"--tls_key", &files.key, &t.key_}}) {
    if (path->empty()) continue;
    std::ifstream in(*path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in || text.str().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", *path));
    }
    *pem = text.str();
  }
  return t;
}

std::shared_ptr<grpc::ServerCredentials> Transport::ServerCredentials() const {
  if (!secure_) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions opts(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  opts.pem_root_certs = ca_;
  opts.pem_key_cert_pairs.push_back({key_, cert_});
  return grpc::SslServerCredentials(opts);
}

std::shared_ptr<grpc::ChannelCredentials> Transport::ChannelCredentials(
    const std::string& token) const {
  if (!secure_) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions opts;
  opts.pem_root_certs = ca_;
  opts.pem_private_key = key_;
  opts.pem_cert_chain = cert_;
  auto creds = grpc::SslCredentials(opts);
  if (token.empty()) return creds;
  return grpc::CompositeChannelCredentials(creds, grpc::AccessTokenCredentials(token));
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const Transport& transport,
                                           const std::string& server_identity,
                                           const std::string& token) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  for (const auto& [name, value] : kKeepalive) args.SetInt(name, value);
  // Fail fast on a dead peer rather than waiting out long reconnect backoffs.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // The certificate names the role, not the address: workers and containers move.
  if (transport.secure()) args.SetSslTargetNameOverride(server_identity);
  return grpc::CreateCustomChannel(address, transport.ChannelCredentials(token), args);
}

void ConfigureServer(grpc::ServerBuilder& builder, const std::string& address,
                     const Transport& transport, int* selected_port) {
  grpc::EnableDefaultHealthCheckService(true);
  builder.AddListeningPort(address, transport.ServerCredentials(), selected_port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  for (const auto& [name, value] : kKeepalive) builder.AddChannelArgument(name, value);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  // gRPC turns SO_REUSEPORT on by default: a second server could then bind this port too
  // and take half its connections. Off, a taken port fails BuildAndStart.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
}

absl::StatusOr<Serving> StartServer(
    const std::string& address, const Transport& transport,
    const std::vector<grpc::Service*>& services, const std::string& port_file,
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors) {
  grpc::ServerBuilder builder;
  Serving s;
  ConfigureServer(builder, address, transport, &s.port);
  if (!interceptors.empty()) builder.experimental().SetInterceptorCreators(std::move(interceptors));
  for (grpc::Service* service : services) builder.RegisterService(service);
  s.server = builder.BuildAndStart();
  if (!s.server || s.port == 0) {
    // gRPC does not say why; a bind of our own does (the port's owner may be gone since).
    if (absl::Status why = CheckPortFree("gRPC", address); !why.ok()) return why;
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  WritePortFile(port_file, s.port);
  return s;
}

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return host;
}

bool IsLoopback(const std::string& address) {
  const std::string host = HostOf(address);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

absl::StatusOr<std::string> LocalAddressFor(const std::string& remote) {
  const size_t colon = remote.rfind(':');
  const std::string port = colon == std::string::npos ? "7070" : remote.substr(colon + 1);
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  if (int rc = getaddrinfo(HostOf(remote).c_str(), port.c_str(), &hints, &result); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", remote, ": ", gai_strerror(rc)));
  }
  std::string out;
  for (addrinfo* ai = result; ai != nullptr && out.empty(); ai = ai->ai_next) {
    // connect() on a UDP socket sends nothing; it only picks the route and source address.
    int fd = socket(ai->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage local = {};
    socklen_t len = sizeof(local);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* a =
          local.ss_family == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (inet_ntop(local.ss_family, a, text, sizeof(text)) != nullptr) out = text;
    }
    close(fd);
  }
  freeaddrinfo(result);
  if (out.empty()) return absl::UnavailableError(absl::StrCat("no route to ", remote));
  return out;
}

}  // namespace lockstep
