// What `lockstep logs` prints of a job's kept events and log lines (two streams, WatchJob
// and WatchLogs): those its filter keeps, merged in time order, then only those since a
// time, then only the last N. Pure functions of their arguments.
#ifndef LOCKSTEP_CLIENTS_CLI_LOG_ORDER_H_
#define LOCKSTEP_CLIENTS_CLI_LOG_ORDER_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "lockstep/v1/job.pb.h"

namespace lockstep::cli {

// `events` ordered by unix_ms, at equal times the job's events before the log lines (each
// kind in the order given: one stream's order), without those before `since_unix_ms` when
// given, and then only the last `tail` when given (>= 0). The same for any interleaving
// of the two streams.
// The log levels, least severe first, as the servers name them (LogLine.level).
inline constexpr std::string_view kLogLevels[] = {"trace",   "debug", "info",
                                                  "warning", "error", "critical"};

// The rank of `level` in kLogLevels ("warn" is "warning"), or -1 for a name that is none.
int Severity(std::string_view level);

// Which events `logs` prints: step events unless `steps` is false (--no-steps), and log
// lines at least as severe as `min_severity` (--level). Evaluations and state changes always.
struct LogFilter {
  bool steps = true;
  int min_severity = 0;
};
bool Keep(const v1::JobEvent& event, const LogFilter& filter);

std::vector<v1::JobEvent> SelectEvents(std::vector<v1::JobEvent> events,
                                       std::optional<int64_t> since_unix_ms,
                                       std::optional<int64_t> tail);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_LOG_ORDER_H_
