// DashboardServer: the coordinator's web dashboard on a port of its own (--dashboard_listen):
// the JSON API (api.h) under /api/, the pages (assets.h) elsewhere. HTTPS with the
// coordinator's certificate and key (the cluster's CA issued them) when TLS is on; plain
// HTTP only where the gRPC side is plaintext too (--insecure). GNU libmicrohttpd, as the
// /metrics listener (services/common/observability/metrics.h says why not CivetWeb), here with a
// small pool of threads: a slow client never holds up another's request, idle connections are
// closed after a timeout, and connections are bounded.
//
// Every answer carries a Content-Security-Policy allowing only this origin's scripts and
// styles (no inline script, no CDN) and X-Content-Type-Options: nosniff; API answers are
// not cached. Thread-safe; the destructor stops the threads and closes every connection.
#ifndef LOCKSTEP_SERVICES_DASHBOARD_SERVER_H_
#define LOCKSTEP_SERVICES_DASHBOARD_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/dashboard/api.h"

struct MHD_Daemon;  // libmicrohttpd's

namespace lockstep {

struct DashboardServerOptions {
  // PEM files of the server's certificate and key: HTTPS. Both empty: plain HTTP.
  std::string cert_file, key_file;
  // Where to write the bound port (for port 0); empty: nowhere.
  std::string port_file;
  absl::Duration idle_timeout = absl::Seconds(30);
  int max_connections = 256;
  int threads = 4;
};

class DashboardServer {
 public:
  // Listens on `address` (host:port; port 0 picks one). INVALID_ARGUMENT for an address
  // without a port, naming a certificate or key file that cannot be read, or for one of
  // the two without the other; UNAVAILABLE naming the address when it cannot listen.
  // `api` must outlive the server.
  static absl::StatusOr<std::unique_ptr<DashboardServer>> Start(
      const std::string& address, const DashboardApi* api, const DashboardServerOptions& options);
  ~DashboardServer();
  int port() const { return port_; }
  bool tls() const { return !cert_.empty(); }

  // The answer to one request (the server's threads call it; so may tests). Refused with
  // 403 first, as a browser's request another site made or a DNS rebinding would be: a
  // request other than GET or HEAD whose Origin is not this Host (a form posted from
  // elsewhere: no token is needed to cancel with --insecure); and without TLS, a Host that
  // is not an IP address or localhost (a name an attacker's DNS points here).
  HttpReply Answer(const HttpRequest& request) const;

 private:
  DashboardServer(const DashboardApi* api, int port, std::string cert, std::string key)
      : api_(api), port_(port), cert_(std::move(cert)), key_(std::move(key)) {}

  const DashboardApi* const api_;
  const int port_;
  const std::string cert_, key_;  // PEM; libmicrohttpd reads them while it runs
  MHD_Daemon* daemon_ = nullptr;  // set once by Start; serves until the destructor
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_DASHBOARD_SERVER_H_
