// For tests: a plain HTTP/1.0 GET on loopback, enough to read a /metrics page or a
// Prometheus API answer without a client library.
#ifndef LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_HTTP_TESTING_H_
#define LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_HTTP_TESTING_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace lockstep::testing {

// The body of GET http://127.0.0.1:<port><path>; UNAVAILABLE when nobody answers,
// FAILED_PRECONDITION with the status line when it is not 200.
inline absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("nothing listens on 127.0.0.1:", port));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("write");
  }
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) response.append(buf, n);
  close(fd);
  const size_t eol = response.find("\r\n");
  const size_t body = response.find("\r\n\r\n");
  if (eol == std::string::npos || body == std::string::npos) {
    return absl::UnavailableError(absl::StrCat("no HTTP answer from 127.0.0.1:", port));
  }
  const std::string status_line = response.substr(0, eol);
  if (status_line.find(" 200") == std::string::npos) {
    return absl::FailedPreconditionError(
        absl::StrCat(status_line, ": ", response.substr(body + 4, 500)));
  }
  return response.substr(body + 4);
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_HTTP_TESTING_H_
