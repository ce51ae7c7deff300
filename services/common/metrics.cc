#include "services/common/metrics.h"

#include <prometheus/exposer.h>

#include <algorithm>
#include <cmath>
#include <exception>
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

MetricsServer::MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, int port)
    : exposer_(std::move(exposer)), port_(port) {}

MetricsServer::~MetricsServer() = default;

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, const std::vector<std::shared_ptr<prometheus::Collectable>>& what,
    const std::string& port_file) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size() ||
      absl::EndsWith(address, "]")) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address ", address, " is not host:port"));
  }
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // One thread: a scrape every few seconds needs no more.
    exposer = std::make_unique<prometheus::Exposer>(address, 1);
  } catch (const std::exception& e) {  // CivetWeb could not bind
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty() || ports[0] <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address));
  }
  for (const auto& c : what) exposer->RegisterCollectable(c);
  WritePortFile(port_file, ports[0]);
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(exposer), ports[0]));
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

}  // namespace lockstep
