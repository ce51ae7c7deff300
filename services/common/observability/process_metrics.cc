// What every Lockstep server exports about itself, besides its own metrics: the standard process
// metrics of Prometheus' client libraries, read from /proc at each scrape, and the build it runs.
// Contract: process_metrics.h.
#include "services/common/observability/process_metrics.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#ifndef LOCKSTEP_VERSION
#define LOCKSTEP_VERSION "unknown"
#endif
#ifndef LOCKSTEP_GIT_COMMIT
#define LOCKSTEP_GIT_COMMIT "unknown"
#endif

namespace lockstep {
namespace {

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type,
                                double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
  return f;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The fields of /proc/[pid]/stat after the command name (which may hold spaces and
// parentheses): [0] is field 3 (state), so field n is at [n - 3].
std::vector<std::string> StatFields(const std::string& stat) {
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return {};
  return absl::StrSplit(stat.substr(close + 1), ' ', absl::SkipWhitespace());
}

}  // namespace

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  const std::vector<std::string> stat = StatFields(ReadAll(proc_ + "/self/stat"));
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  double utime, stime, start_ticks, vsize, rss;
  if (stat.size() > 21 && absl::SimpleAtod(stat[14 - 3], &utime) &&
      absl::SimpleAtod(stat[15 - 3], &stime) && absl::SimpleAtod(stat[22 - 3], &start_ticks) &&
      absl::SimpleAtod(stat[23 - 3], &vsize) && absl::SimpleAtod(stat[24 - 3], &rss)) {
    out.push_back(Family("process_cpu_seconds_total",
                         "Total user and system CPU time spent in seconds.",
                         prometheus::MetricType::Counter, (utime + stime) / ticks));
    out.push_back(Family("process_resident_memory_bytes", "Resident memory size in bytes.",
                         prometheus::MetricType::Gauge, rss * page));
    out.push_back(Family("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                         prometheus::MetricType::Gauge, vsize));
    // The start, in ticks since boot; boot time from /proc/stat's btime.
    for (absl::string_view line : absl::StrSplit(ReadAll(proc_ + "/stat"), '\n')) {
      double boot;
      if (absl::ConsumePrefix(&line, "btime ") && absl::SimpleAtod(line, &boot)) {
        out.push_back(Family("process_start_time_seconds",
                             "Start time of the process since unix epoch in seconds.",
                             prometheus::MetricType::Gauge, boot + start_ticks / ticks));
        break;
      }
    }
  }
  // The listing's own descriptor is counted too, as Prometheus' Go client counts it.
  std::error_code ec;
  double fds = 0;
  for (std::filesystem::directory_iterator it(proc_ + "/self/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++fds;
  }
  if (!ec) {
    out.push_back(Family("process_open_fds", "Number of open file descriptors.",
                         prometheus::MetricType::Gauge, fds));
  }
  return out;
}

std::string BuildVersion() { return LOCKSTEP_VERSION; }
std::string BuildGitCommit() { return LOCKSTEP_GIT_COMMIT; }

std::vector<prometheus::MetricFamily> BuildInfoCollector::Collect() const {
  prometheus::MetricFamily f = Family(
      "lockstep_build_info", "The build this server runs: its version and git commit; always 1",
      prometheus::MetricType::Gauge, 1);
  f.metric[0].label = {{"git", BuildGitCommit()}, {"version", BuildVersion()}};
  return {std::move(f)};
}

}  // namespace lockstep
