// What every Lockstep server exports about itself, besides its own metrics: the standard
// process metrics of Prometheus' client libraries, read from /proc at each scrape, and the
// build it runs.
//
//   process_cpu_seconds_total            user and system CPU time
//   process_resident_memory_bytes        resident set size
//   process_virtual_memory_bytes         virtual memory size
//   process_start_time_seconds           start time, seconds since the Unix epoch
//   process_open_fds                     open file descriptors
//   lockstep_build_info{version,git} 1   the project's version and git commit (at configure
//                                        time; "unknown" outside a git checkout)
//
// ServeMetrics (rpc_metrics.h) serves both next to a server's own collectables, so the
// coordinator and the workers export them.
#ifndef LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_PROCESS_METRICS_H_
#define LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_PROCESS_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <string>
#include <vector>

namespace lockstep {

// The process_* metrics of this process, read from `proc` (/proc; another folder with the
// same layout in tests) at each Collect. A file it cannot read leaves its metrics out of
// that scrape. Thread-safe (nothing is cached).
class ProcessCollector final : public prometheus::Collectable {
 public:
  explicit ProcessCollector(std::string proc = "/proc") : proc_(std::move(proc)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::string proc_;
};

// The version and git commit this binary was built from.
std::string BuildVersion();
std::string BuildGitCommit();

// lockstep_build_info{version, git} = 1. Thread-safe.
class BuildInfoCollector final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_PROCESS_METRICS_H_
