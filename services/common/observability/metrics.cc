// Prometheus metrics, the shared part: a lock-free histogram family, the HTTP listener
// (--metrics_listen) that serves every registered collectable on /metrics, and a reader of values
// for unit tests (no HTTP needed). Contract: metrics.h.
#include "services/common/observability/metrics.h"

#include <microhttpd.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "services/common/flags.h"
#include "services/common/rpc/listen_socket.h"

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

namespace {

// Answers one request (libmicrohttpd's MHD_AccessHandlerCallback), on the server's thread.
// `cls` is the MetricsServer. The query string is not part of `url`; HEAD gets GET's
// headers without the body (libmicrohttpd leaves it out).
MHD_Result Answer(void* cls, MHD_Connection* connection, const char* url, const char* method,
                  const char* /*version*/, const char* /*upload_data*/,
                  size_t* /*upload_data_size*/, void** /*request*/) {
  const auto* server = static_cast<const MetricsServer*>(cls);
  unsigned int code = MHD_HTTP_OK;
  std::string body;
  if (std::strcmp(method, "GET") != 0 && std::strcmp(method, "HEAD") != 0) {
    code = MHD_HTTP_METHOD_NOT_ALLOWED;
  } else if (std::strcmp(url, "/metrics") != 0) {
    code = MHD_HTTP_NOT_FOUND;
    body = "Lockstep serves its metrics on /metrics\n";
  } else {
    body = server->Page();
  }
  MHD_Response* response =
      MHD_create_response_from_buffer(body.size(), body.data(), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;  // out of memory: the connection is closed
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
                          "text/plain; version=0.0.4; charset=utf-8");
  if (code == MHD_HTTP_METHOD_NOT_ALLOWED) {
    MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  }
  const MHD_Result queued = MHD_queue_response(connection, code, response);
  MHD_destroy_response(response);
  return queued;
}

}  // namespace

MetricsServer::~MetricsServer() {
  // Stops the thread and closes every connection and the listening socket.
  MHD_stop_daemon(daemon_);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, std::vector<std::shared_ptr<prometheus::Collectable>> what,
    const std::string& port_file, const MetricsServerOptions& options) {
  absl::StatusOr<int> fd = ListenTcp("metrics", address, 128);
  if (!fd.ok()) return fd.status();
  const int port = BoundPort(*fd);
  std::unique_ptr<MetricsServer> server(new MetricsServer(port, std::move(what)));
  const auto idle_seconds = static_cast<unsigned int>(std::max<int64_t>(
      1, absl::ToInt64Seconds(absl::Ceil(options.idle_timeout, absl::Seconds(1)))));
  server->daemon_ = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, nullptr, nullptr, &Answer, server.get(),
      MHD_OPTION_LISTEN_SOCKET, static_cast<MHD_socket>(*fd),  //
      MHD_OPTION_CONNECTION_TIMEOUT, idle_seconds,             //
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned int>(std::max(1, options.max_connections)),
      // 0: the system's default stack (8 MiB from RLIMIT_STACK), as std::thread's; never a
      // fixed small one (see the top of metrics.h).
      MHD_OPTION_THREAD_STACK_SIZE, static_cast<size_t>(0),  //
      MHD_OPTION_END);
  if (server->daemon_ == nullptr) {
    close(*fd);
    return absl::InternalError(
        absl::StrCat("cannot serve metrics on ", address, ": libmicrohttpd did not start"));
  }
  WritePortFile(port_file, port);
  return server;
}

std::string MetricsServer::Page() const {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& c : what_) {
    for (prometheus::MetricFamily& f : c->Collect()) families.push_back(std::move(f));
  }
  return prometheus::TextSerializer().Serialize(families);
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
