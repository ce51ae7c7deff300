// DefaultHostAddress (gloo_collective.h): the address a rank advertises when its options
// name none. Gloo's own default, the hostname, resolves to 127.0.1.1 on a stock Debian
// host, which peers on other hosts cannot reach; this looks past loopback addresses.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "workers/gloo/gloo_collective.h"

namespace lockstep {
namespace {

// The numeric form of an IPv4 or IPv6 address, or nullopt for loopback and other
// families.
std::optional<std::string> NonLoopbackAddress(const sockaddr* addr) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) return std::nullopt;
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    return std::string(text);
  }
  if (addr->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) || IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) {
      return std::nullopt;
    }
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    return std::string(text);
  }
  return std::nullopt;
}

// The first non-loopback address the hostname resolves to.
std::optional<std::string> FromHostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return std::nullopt;
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(name, nullptr, &hints, &result) != 0) return std::nullopt;
  std::optional<std::string> address;
  for (addrinfo* ai = result; ai != nullptr && !address; ai = ai->ai_next) {
    address = NonLoopbackAddress(ai->ai_addr);
  }
  freeaddrinfo(result);
  return address;
}

}  // namespace

absl::StatusOr<std::string> DefaultHostAddress() {
  if (std::optional<std::string> address = FromHostname()) return *address;
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) {
    return absl::UnavailableError(absl::StrCat("gloo: getifaddrs failed: ", std::strerror(errno)));
  }
  std::optional<std::string> address;
  for (ifaddrs* i = interfaces; i != nullptr && !address; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    address = NonLoopbackAddress(i->ifa_addr);
  }
  freeifaddrs(interfaces);
  return address.value_or("127.0.0.1");
}

}  // namespace lockstep
