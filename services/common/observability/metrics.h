// Prometheus metrics, the shared part: a lock-free histogram family, the HTTP listener
// (--metrics_listen) that serves every registered collectable on /metrics, and a reader of
// values for unit tests (no HTTP needed).
//
// The listener is GNU libmicrohttpd (Debian's libmicrohttpd-dev), not prometheus-cpp-pull's
// Exposer: Debian's CivetWeb (under the Exposer) starts its threads with a fixed 100 KiB
// stack, compiled in, smaller than a worker's static TLS (cuBLASLt, OpenBLAS, NCCL: about
// 170 KiB), so pthread_create fails there with EINVAL. libmicrohttpd takes the stack size
// as an option (we leave it the system's default, as std::thread does) and serves every
// connection from one event loop (epoll) with a per-connection inactivity timeout and a
// bound on connections: idle or slow clients never delay a scrape.
//
// The servers' metrics live in a small class per server (CoordinatorMetrics,
// WorkerMetrics) that the plain classes call; this file knows nothing about jobs.
// Counters and gauges are prometheus-cpp's (std::atomic<double>); histograms are ours,
// because prometheus-cpp 1.0's Histogram::Observe takes a mutex and these are observed on
// the step path.
//
// Naming: `lockstep_` prefix, base units (`_seconds`, `_bytes`), `_total` on counters;
// labels take values from fixed sets (states, phases, RPC methods and codes) or job ids
// whose series are removed (CoordinatorMetrics says when).
#ifndef LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_METRICS_H_
#define LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/labels.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

struct MHD_Daemon;  // libmicrohttpd's

namespace lockstep {

// Bucket bounds for durations from 100 us to 100 s (seconds), about 3 per decade.
std::vector<double> DurationBuckets();

// One histogram series with fixed buckets. Observe is lock-free (relaxed atomics): a
// scrape may see a sample's bucket before its sum, never a torn value. Thread-safe.
class AtomicHistogram {
 public:
  explicit AtomicHistogram(std::vector<double> bounds);
  void Observe(double value);
  prometheus::ClientMetric::Histogram Snapshot() const;

 private:
  const std::vector<double> bounds_;                 // ascending; +Inf is implied
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1, not cumulative
  std::atomic<double> sum_{0};
};

// A histogram metric with a fixed set of series, one per label set given at construction
// (e.g. phase="compute", "allreduce", "update"). Collectable: register it with a
// MetricsServer. Thread-safe.
class HistogramFamily final : public prometheus::Collectable {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<prometheus::Labels> series,
                  std::vector<double> bounds);
  // The series with labels series[i] (as given to the constructor).
  AtomicHistogram& at(size_t i) { return *series_[i]; }
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::string name_, help_;
  const std::vector<prometheus::Labels> labels_;
  std::vector<std::unique_ptr<AtomicHistogram>> series_;
};

// How the listener treats its clients.
struct MetricsServerOptions {
  // A connection silent this long (whole seconds, at least 1) is closed: a request not sent
  // whole, or a kept-alive connection not used again.
  absl::Duration idle_timeout = absl::Seconds(10);
  // Connections served at once; more wait in the listen backlog (128) until one closes.
  int max_connections = 256;
};

// The HTTP listener: GET /metrics answers the collectables' samples in Prometheus's text
// format (other paths 404, other methods 405), on one event-loop thread of its own, many
// connections at once (HTTP/1.1 keep-alive). Plain HTTP, no authentication: bind it to
// loopback or a private network (deploy/CONFIGURATION.md). Thread-safe; the destructor
// closes the listener and every connection.
class MetricsServer {
 public:
  // Listens on `address` (host:port, [v6]:port; port 0 picks one; without SO_REUSEPORT:
  // listen_socket.h), writing the bound port to `port_file` when it is not empty.
  // INVALID_ARGUMENT for an address without a port or a host that does not resolve,
  // UNAVAILABLE naming the address (and the port when it is taken) when it cannot listen.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, std::vector<std::shared_ptr<prometheus::Collectable>> what,
      const std::string& port_file, const MetricsServerOptions& options = {});
  ~MetricsServer();
  int port() const { return port_; }
  // The page GET /metrics answers.
  std::string Page() const;

 private:
  MetricsServer(int port, std::vector<std::shared_ptr<prometheus::Collectable>> what)
      : port_(port), what_(std::move(what)) {}

  const int port_;
  const std::vector<std::shared_ptr<prometheus::Collectable>> what_;
  MHD_Daemon* daemon_ = nullptr;  // set once by Start; serves until the destructor
};

// The value of the sample `name` with exactly `labels` among what `c` collects: a
// counter's or gauge's value; for histograms, `name` ending in _count or _sum. NOT_FOUND
// naming the series when there is none. For tests.
absl::StatusOr<double> ReadMetric(const prometheus::Collectable& c, std::string_view name,
                                  const prometheus::Labels& labels = {});
// The same among several (a CoordinatorMetrics' or WorkerMetrics' collectables()).
absl::StatusOr<double> ReadMetric(
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables,
    std::string_view name, const prometheus::Labels& labels = {});

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_METRICS_H_
