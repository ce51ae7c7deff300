// For tests of the HTTP listeners (metrics, dashboard) against slow clients: many
// connections that trickle a request's header a line at a time and never finish it, as a
// slowloris attack holds them, over plain TCP or TLS; and an HTTPS GET (OpenSSL, the
// certificate not verified: these tests are about availability, not identity). Link
// OpenSSL::SSL.
#ifndef LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_SLOW_CLIENTS_TESTING_H_
#define LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_SLOW_CLIENTS_TESTING_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace lockstep::testing {

// A TCP connection from `source` (an address of this host: 127.0.0.2 is loopback too, and
// counts as another client's) to 127.0.0.1:port; -1 when it cannot connect.
inline int ConnectFrom(const std::string& source, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{}, to{};
  from.sin_family = to.sin_family = AF_INET;
  inet_pton(AF_INET, source.c_str(), &from.sin_addr);
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Owns an OpenSSL client context and the connections made with it.
class TlsClient {
 public:
  TlsClient() : ctx_(SSL_CTX_new(TLS_client_method())) {
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
  }
  ~TlsClient() {
    for (SSL* ssl : sessions_) SSL_free(ssl);
    SSL_CTX_free(ctx_);
  }
  // A TLS session over `fd` after a completed handshake; null when the server refused it
  // (or closed the connection).
  SSL* Handshake(int fd) {
    SSL* ssl = SSL_new(ctx_);
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) != 1) {
      SSL_free(ssl);
      return nullptr;
    }
    sessions_.push_back(ssl);
    return ssl;
  }

 private:
  SSL_CTX* const ctx_;
  std::vector<SSL*> sessions_;
};

// The whole answer (status line, headers, body) to GET https://127.0.0.1:port<path>, read
// until the server closes; UNAVAILABLE when no TLS session or no answer comes.
inline absl::StatusOr<std::string> HttpsGet(int port, const std::string& path) {
  const int fd = ConnectFrom("127.0.0.1", port);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("nothing listens on port ", port));
  TlsClient client;
  SSL* ssl = client.Handshake(fd);
  std::string response;
  if (ssl != nullptr) {
    const std::string request =
        absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    SSL_write(ssl, request.data(), static_cast<int>(request.size()));
    char buf[4096];
    for (int n; (n = SSL_read(ssl, buf, sizeof(buf))) > 0;) response.append(buf, n);
  }
  close(fd);
  if (response.find("\r\n\r\n") == std::string::npos) {
    return absl::UnavailableError(absl::StrCat("no HTTPS answer from port ", port));
  }
  return response;
}

// `n` connections from `source` to 127.0.0.1:port, each (after a TLS handshake when `tls`)
// sending the start of a request; Trickle sends each one more header line. The server
// may refuse some at once (a cap) or close them later (a deadline). Not thread-safe.
class SlowClients {
 public:
  SlowClients(int port, const std::string& source, int n, bool tls) {
    signal(SIGPIPE, SIG_IGN);  // a write to a connection the server closed fails, no more
    for (int i = 0; i < n; ++i) {
      const int fd = ConnectFrom(source, port);
      if (fd < 0) continue;
      // A handshake the server never starts (a connection left in its backlog) fails soon.
      timeval tv{1, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      Client c{fd, nullptr};
      if (tls && (c.ssl = tls_.Handshake(fd)) == nullptr) {
        close(fd);
        continue;
      }
      clients_.push_back(c);
      Send(c, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    }
  }
  ~SlowClients() {
    for (const Client& c : clients_) close(c.fd);
  }

  // Trickles until at most `most` are open (the server closes the ones past its cap as it
  // accepts them, not all at once) or `limit` has passed; how many are open.
  int TrickleUntilAtMost(int most, absl::Duration limit) {
    const absl::Time end = absl::Now() + limit;
    int open = Trickle();
    while (open > most && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(100));  // the clients' pace
      open = Trickle();
    }
    return open;
  }

  // Sends one more header line on every connection still open; how many are open.
  int Trickle() {
    int open = 0;
    for (Client& c : clients_) {
      if (c.fd < 0) continue;
      // Whatever a server sends a client that has not finished its header (an error, a TLS
      // alert, the end of the stream) means it is done with it.
      pollfd p = {c.fd, POLLIN | POLLRDHUP, 0};
      if (poll(&p, 1, 0) != 0 || !Send(c, "X-Slow: 1\r\n")) {
        close(c.fd);
        c.fd = -1;
        continue;
      }
      ++open;
    }
    return open;
  }

 private:
  struct Client {
    int fd;
    SSL* ssl;
  };
  static bool Send(const Client& c, const std::string& text) {
    const int size = static_cast<int>(text.size());
    if (c.ssl != nullptr) return SSL_write(c.ssl, text.data(), size) == size;
    return send(c.fd, text.data(), text.size(), MSG_NOSIGNAL) == size;
  }

  TlsClient tls_;
  std::vector<Client> clients_;
};

}  // namespace lockstep::testing

#endif  // LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_SLOW_CLIENTS_TESTING_H_
