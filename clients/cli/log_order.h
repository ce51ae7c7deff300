// What `lockstep logs` prints of a job's kept events and log lines (two streams, WatchJob
// and WatchLogs): merged in time order, then only those since a time, then only the last N.
// Pure functions of their arguments.
#ifndef LOCKSTEP_CLIENTS_CLI_LOG_ORDER_H_
#define LOCKSTEP_CLIENTS_CLI_LOG_ORDER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "lockstep/v1/job.pb.h"

namespace lockstep::cli {

// `events` ordered by unix_ms, at equal times the job's events before the log lines (each
// kind in the order given: one stream's order), without those before `since_unix_ms` when
// given, and then only the last `tail` when given (>= 0). The same for any interleaving
// of the two streams.
std::vector<v1::JobEvent> SelectEvents(std::vector<v1::JobEvent> events,
                                       std::optional<int64_t> since_unix_ms,
                                       std::optional<int64_t> tail);

}  // namespace lockstep::cli

#endif  // LOCKSTEP_CLIENTS_CLI_LOG_ORDER_H_
