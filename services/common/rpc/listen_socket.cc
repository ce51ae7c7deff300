// Listening sockets that are this process's alone. Contract: listen_socket.h.
#include "services/common/rpc/listen_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

struct FreeAddrinfo {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};

// A socket bound to `address`, listening when backlog > 0.
absl::StatusOr<int> Bind(const std::string& what, const std::string& address, int backlog) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size() ||
      absl::EndsWith(address, "]")) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " address ", address, " is not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " address ", address, ": ", gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, FreeAddrinfo> owned(found);
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, " (", what, "): ", std::strerror(errno)));
  }
  const int yes = 1, no = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &no, sizeof(no));  // off, as it is by default
  if (bind(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      (backlog <= 0 || listen(fd, backlog) == 0)) {
    return fd;
  }
  const int error = errno;
  close(fd);
  if (error == EADDRINUSE) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, " (", what, "): port ",
                                               port, " is in use by another process"));
  }
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", address, " (", what, "): ", std::strerror(error)));
}

}  // namespace

absl::StatusOr<int> ListenTcp(const std::string& what, const std::string& address, int backlog) {
  return Bind(what, address, backlog < 1 ? 1 : backlog);
}

absl::Status CheckPortFree(const std::string& what, const std::string& address) {
  absl::StatusOr<int> fd = Bind(what, address, 0);
  if (!fd.ok()) return fd.status();
  close(*fd);
  return absl::OkStatus();
}

absl::Status CheckPortsFree(const std::vector<std::pair<std::string, std::string>>& listeners) {
  for (const auto& [flag, address] : listeners) {
    if (address.empty()) continue;
    if (absl::Status st = CheckPortFree(flag, address); !st.ok()) return st;
  }
  return absl::OkStatus();
}

int BoundPort(int fd) {
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) return 0;
  return ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

}  // namespace lockstep
