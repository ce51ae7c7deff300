#include "services/common/metrics.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/text_serializer.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/common/flags.h"

namespace lockstep {
std::vector<double> DurationBuckets() {
  std::vector<double> out;
  for (double decade = 1e-4; decade < 100; decade *= 10) {
    for (double m : {1.0, 2.5, 5.0}) out.push_back(decade * m);
  }
  out.push_back(100);
  return out;
}

AtomicHistogram::AtomicHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void AtomicHistogram::Observe(double value) {
  // The first bucket whose bound is >= value (Prometheus's `le`), or +Inf.
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

prometheus::ClientMetric::Histogram AtomicHistogram::Snapshot() const {
  prometheus::ClientMetric::Histogram h;
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    h.bucket.push_back(
        {cumulative, i < bounds_.size() ? bounds_[i] : std::numeric_limits<double>::infinity()});
  }
  h.sample_count = cumulative;
  h.sample_sum = sum_.load(std::memory_order_relaxed);
  return h;
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<prometheus::Labels> series, std::vector<double> bounds)
    : name_(std::move(name)), help_(std::move(help)), labels_(std::move(series)) {
  for (size_t i = 0; i < labels_.size(); ++i) {
    series_.push_back(std::make_unique<AtomicHistogram>(bounds));
  }
}

std::vector<prometheus::MetricFamily> HistogramFamily::Collect() const {
  prometheus::MetricFamily f;
  f.name = name_;
  f.help = help_;
  f.type = prometheus::MetricType::Histogram;
  for (size_t i = 0; i < labels_.size(); ++i) {
    prometheus::ClientMetric m;
    for (const auto& [k, v] : labels_[i]) m.label.push_back({k, v});
    m.histogram = series_[i]->Snapshot();
    f.metric.push_back(std::move(m));
  }
  return {std::move(f)};
}

MetricsServer::MetricsServer(int listen_fd, int wake_fd, int port,
                             std::vector<std::shared_ptr<prometheus::Collectable>> what)
    : listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port), what_(std::move(what)) {
  thread_ = std::thread([this] { Serve(); });
}

MetricsServer::~MetricsServer() {
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) {
    // An eventfd's write fails only on overflow; Serve wakes either way.
  }
  thread_.join();
  close(listen_fd_);
  close(wake_fd_);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, std::vector<std::shared_ptr<prometheus::Collectable>> what,
    const std::string& port_file) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size() ||
      absl::EndsWith(address, "]")) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address ", address, " is not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string service = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address ", address, ": ", gai_strerror(rc)));
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int yes = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  const bool listening =
      fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0 && listen(fd, 16) == 0;
  const int error = errno;
  freeaddrinfo(found);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (!listening || getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", std::strerror(error)));
  }
  const int port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const int wake = eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    close(fd);
    return absl::InternalError("eventfd failed");
  }
  WritePortFile(port_file, port);
  return std::unique_ptr<MetricsServer>(new MetricsServer(fd, wake, port, std::move(what)));
}

std::string MetricsServer::Page() const {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& c : what_) {
    for (prometheus::MetricFamily& f : c->Collect()) families.push_back(std::move(f));
  }
  return prometheus::TextSerializer().Serialize(families);
}

void MetricsServer::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    const int connection = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    Answer(connection);
    close(connection);
  }
}

void MetricsServer::Answer(int connection) const {
  // A slow or silent client holds the thread for at most this long.
  const timeval limit = {2, 0};
  setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  std::string request;
  char buf[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 8192) {
    const ssize_t n = read(connection, buf, sizeof(buf));
    if (n <= 0) break;
    request.append(buf, n);
  }
  // "GET /metrics?x HTTP/1.1": the method, and the path without its query.
  const size_t sp1 = request.find(' ');
  const size_t sp2 = request.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos) return;
  const std::string method = request.substr(0, sp1);
  std::string path = request.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  std::string status = "200 OK", body;
  if (method != "GET" && method != "HEAD") {
    status = "405 Method Not Allowed";
  } else if (path != "/metrics") {
    status = "404 Not Found";
    body = "Lockstep serves its metrics on /metrics\n";
  } else {
    body = Page();
  }
  std::string response = absl::StrCat(
      "HTTP/1.1 ", status, "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n",
      "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n");
  if (method != "HEAD") response += body;
  for (size_t sent = 0; sent < response.size();) {
    const ssize_t n =
        send(connection, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += n;
  }
}

absl::StatusOr<double> ReadMetric(const prometheus::Collectable& c, std::string_view name,
                                  const prometheus::Labels& labels) {
  std::vector<prometheus::ClientMetric::Label> want;
  for (const auto& [k, v] : labels) want.push_back({k, v});
  std::sort(want.begin(), want.end());
  for (const prometheus::MetricFamily& f : c.Collect()) {
    const bool histogram = f.type == prometheus::MetricType::Histogram;
    const bool count = histogram && name == f.name + "_count";
    const bool sum = histogram && name == f.name + "_sum";
    if (!count && !sum && name != f.name) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      std::vector<prometheus::ClientMetric::Label> got = m.label;
      std::sort(got.begin(), got.end());
      if (got != want) continue;
      switch (f.type) {
        case prometheus::MetricType::Counter:
          return m.counter.value;
        case prometheus::MetricType::Gauge:
          return m.gauge.value;
        case prometheus::MetricType::Histogram:
          if (count) return static_cast<double>(m.histogram.sample_count);
          if (sum) return m.histogram.sample_sum;
          break;
        default:
          break;
      }
    }
  }
  std::string series(name);
  for (const auto& [k, v] : labels) absl::StrAppend(&series, " ", k, "=", v);
  return absl::NotFoundError(absl::StrCat("no metric ", series));
}

absl::StatusOr<double> ReadMetric(
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables,
    std::string_view name, const prometheus::Labels& labels) {
  for (const auto& c : collectables) {
    absl::StatusOr<double> v = ReadMetric(*c, name, labels);
    if (v.ok()) return v;
  }
  return absl::NotFoundError(absl::StrCat("no metric ", std::string(name)));
}

}  // namespace lockstep
