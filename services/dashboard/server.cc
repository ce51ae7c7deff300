// DashboardServer: the coordinator's web dashboard on a port of its own (--dashboard_listen): the
// JSON API (api.h) under /api/, the pages (assets.h) elsewhere. Contract: server.h.
#include "services/dashboard/server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/common/flags.h"
#include "services/common/rpc/listen_socket.h"
#include "services/dashboard/assets.h"

namespace lockstep {
namespace {

// Only this origin's scripts, styles and API; nothing inline, nothing framed.
constexpr char kPolicy[] =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

// A request's body is not read (the API takes none): past this many bytes it is refused.
constexpr size_t kMaxBody = 4096;

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  if (!in || !(text << in.rdbuf())) {
    return absl::InvalidArgumentError(absl::StrCat("dashboard: cannot read the ", what, " ", path));
  }
  return text.str();
}

MHD_Result AddQueryValue(void* cls, MHD_ValueKind, const char* key, const char* value) {
  (*static_cast<std::map<std::string, std::string>*>(cls))[key] = value == nullptr ? "" : value;
  return MHD_YES;
}

// Per-request state across libmicrohttpd's calls of Handle: the body's size so far.
struct Pending {
  size_t body = 0;
};

void Completed(void*, MHD_Connection*, void** request, MHD_RequestTerminationCode) {
  delete static_cast<Pending*>(*request);
  *request = nullptr;
}

// libmicrohttpd's MHD_AccessHandlerCallback: called once with the headers, then for each
// piece of the body, then once more with none, when it answers.
MHD_Result Handle(void* cls, MHD_Connection* connection, const char* url, const char* method,
                  const char*, const char*, size_t* upload_data_size, void** request) {
  if (*request == nullptr) {
    *request = new Pending;
    return MHD_YES;
  }
  auto* pending = static_cast<Pending*>(*request);
  if (*upload_data_size != 0) {
    pending->body += *upload_data_size;
    *upload_data_size = 0;  // the API takes no body: counted and dropped
    return MHD_YES;
  }
  const auto* server = static_cast<const DashboardServer*>(cls);
  HttpRequest r;
  r.method = method;
  r.path = url;
  MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, &AddQueryValue, &r.query);
  const char* auth =
      MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (auth != nullptr) r.authorization = auth;
  const char* host = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
  if (host != nullptr) r.host = host;
  const char* origin = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Origin");
  if (origin != nullptr) r.origin = origin;
  HttpReply reply = pending->body > kMaxBody
                        ? ErrorReply(absl::InvalidArgumentError("the API takes no request body"))
                        : server->Answer(r);
  MHD_Response* response =
      MHD_create_response_from_buffer(reply.body.size(), reply.body.data(), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;  // out of memory: the connection is closed
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, reply.content_type.c_str());
  MHD_add_response_header(response, "Content-Security-Policy", kPolicy);
  MHD_add_response_header(response, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(response, "Referrer-Policy", "no-referrer");
  for (const auto& [name, value] : reply.headers) {
    MHD_add_response_header(response, name.c_str(), value.c_str());
  }
  const MHD_Result queued =
      MHD_queue_response(connection, static_cast<unsigned int>(reply.code), response);
  MHD_destroy_response(response);
  return queued;
}

// The host of a Host header or an origin's authority, without the port.
absl::string_view HostName(absl::string_view authority) {
  if (absl::StartsWith(authority, "[")) return authority.substr(0, authority.find(']') + 1);
  return authority.substr(0, authority.rfind(':'));
}

// Whether `host` (no port) is an IP address or localhost: names no other DNS can give.
bool AddressOrLocalhost(absl::string_view host) {
  if (host == "localhost" || absl::StartsWith(host, "[")) return true;
  in_addr v4;
  return inet_pton(AF_INET, std::string(host).c_str(), &v4) == 1;
}

absl::Status CheckSameOrigin(const HttpRequest& r, bool tls) {
  if (!tls && !AddressOrLocalhost(HostName(r.host))) {
    return absl::PermissionDeniedError(
        absl::StrCat("Host ", r.host,
                     " refused: without TLS the dashboard answers only to an IP address "
                     "or localhost"));
  }
  if (r.method != "GET" && r.method != "HEAD" && !r.origin.empty()) {
    const size_t scheme = r.origin.find("://");
    const absl::string_view authority = scheme == std::string::npos
                                            ? absl::string_view()
                                            : absl::string_view(r.origin).substr(scheme + 3);
    if (authority != r.host) {
      return absl::PermissionDeniedError(
          absl::StrCat(r.method, " from origin ", r.origin, " refused: not this site"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

HttpReply DashboardServer::Answer(const HttpRequest& request) const {
  if (absl::Status st = CheckSameOrigin(request, tls()); !st.ok()) return ErrorReply(st);
  if (absl::StartsWith(request.path, "/api/")) {
    HttpReply reply = api_->Handle(request);
    reply.headers.emplace_back("Cache-Control", "no-store");
    return reply;
  }
  const Asset* asset = FindAsset(request.path);
  if (asset == nullptr) {
    return ErrorReply(absl::NotFoundError(absl::StrCat("no page ", request.path)));
  }
  if (request.method != "GET" && request.method != "HEAD") {
    HttpReply reply = ErrorReply(absl::InvalidArgumentError("pages take GET"));
    reply.code = 405;
    reply.headers.emplace_back("Allow", "GET, HEAD");
    return reply;
  }
  HttpReply reply;
  reply.content_type = std::string(asset->content_type);
  reply.body = std::string(asset->body);
  reply.headers.emplace_back("Cache-Control", "no-cache");
  return reply;
}

DashboardServer::~DashboardServer() { MHD_stop_daemon(daemon_); }

absl::StatusOr<std::unique_ptr<DashboardServer>> DashboardServer::Start(
    const std::string& address, const DashboardApi* api, const DashboardServerOptions& options) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError("dashboard: HTTPS needs both a certificate and a key");
  }
  std::string cert, key;
  if (!options.cert_file.empty()) {
    absl::StatusOr<std::string> c = ReadPem(options.cert_file, "certificate");
    if (!c.ok()) return c.status();
    absl::StatusOr<std::string> k = ReadPem(options.key_file, "key");
    if (!k.ok()) return k.status();
    cert = *std::move(c);
    key = *std::move(k);
  }
  absl::StatusOr<int> fd = ListenTcp("dashboard", address, 128);
  if (!fd.ok()) return fd.status();
  const int port = BoundPort(*fd);
  std::unique_ptr<DashboardServer> server(
      new DashboardServer(api, port, std::move(cert), std::move(key)));
  const auto idle_seconds = static_cast<unsigned int>(std::max<int64_t>(
      1, absl::ToInt64Seconds(absl::Ceil(options.idle_timeout, absl::Seconds(1)))));
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
  if (server->tls()) flags |= MHD_USE_TLS;
  MHD_OptionItem tls_options[] = {
      {MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(server->cert_.c_str())},
      {MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(server->key_.c_str())},
      {MHD_OPTION_END, 0, nullptr}};
  MHD_OptionItem no_options[] = {{MHD_OPTION_END, 0, nullptr}};
  server->daemon_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &Handle, server.get(),       //
      MHD_OPTION_LISTEN_SOCKET, static_cast<MHD_socket>(*fd),  //
      MHD_OPTION_NOTIFY_COMPLETED, &Completed, nullptr,        //
      MHD_OPTION_CONNECTION_TIMEOUT, idle_seconds,             //
      MHD_OPTION_CONNECTION_LIMIT,
      static_cast<unsigned int>(std::max(1, options.max_connections)),  //
      MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned int>(std::max(1, options.threads)),
      // 0: the system's default stack, never a fixed small one
      // (services/common/observability/metrics.h).
      MHD_OPTION_THREAD_STACK_SIZE, static_cast<size_t>(0),  //
      MHD_OPTION_ARRAY, server->tls() ? tls_options : no_options, MHD_OPTION_END);
  if (server->daemon_ == nullptr) {
    close(*fd);
    return absl::InternalError(
        absl::StrCat("cannot serve the dashboard on ", address, ": libmicrohttpd did not start",
                     server->tls() ? " (is the key the certificate's?)" : ""));
  }
  WritePortFile(options.port_file, port);
  return server;
}

}  // namespace lockstep
