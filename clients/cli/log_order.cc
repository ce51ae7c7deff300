// What `lockstep logs` prints of a job's kept events and log lines (two streams, WatchJob and
// WatchLogs): merged in time order, then only those since a time, then only the last N. Contract:
// log_order.h.
#include "clients/cli/log_order.h"

#include <algorithm>

namespace lockstep::cli {

int Severity(std::string_view level) {
  if (level == "warn") level = "warning";
  for (size_t i = 0; i < std::size(kLogLevels); ++i) {
    if (kLogLevels[i] == level) return static_cast<int>(i);
  }
  return -1;
}

bool Keep(const v1::JobEvent& e, const LogFilter& filter) {
  if (e.has_step()) return filter.steps;
  // A line of an unknown level is kept: better shown than lost.
  if (e.has_log())
    return Severity(e.log().level()) < 0 || Severity(e.log().level()) >= filter.min_severity;
  return true;
}

std::vector<v1::JobEvent> SelectEvents(std::vector<v1::JobEvent> events,
                                       std::optional<int64_t> since_unix_ms,
                                       std::optional<int64_t> tail) {
  std::stable_sort(events.begin(), events.end(), [](const v1::JobEvent& a, const v1::JobEvent& b) {
    if (a.unix_ms() != b.unix_ms()) return a.unix_ms() < b.unix_ms();
    return !a.has_log() && b.has_log();
  });
  if (since_unix_ms.has_value()) {
    std::erase_if(events, [&](const v1::JobEvent& e) { return e.unix_ms() < *since_unix_ms; });
  }
  if (tail.has_value() && static_cast<int64_t>(events.size()) > *tail) {
    events.erase(events.begin(), events.end() - std::max<int64_t>(0, *tail));
  }
  return events;
}

}  // namespace lockstep::cli
