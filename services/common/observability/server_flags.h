// The observability flags both Lockstep servers take (beside the security flags of
// server_security.h):
//
//   --metrics_listen HOST:PORT   Prometheus metrics over plain HTTP (empty: off)
//   --metrics_port_file FILE     the metrics port actually bound (for port 0)
//   --log_format text|json       the log lines' form (job_log.h)
#ifndef LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_SERVER_FLAGS_H_
#define LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_SERVER_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace lockstep {

struct MetricsFlags {
  std::string listen;  // empty: no metrics listener
  std::string port_file;
  bool on() const { return !listen.empty(); }
};
MetricsFlags GetMetricsFlags();

// Sets the log format --log_format names; INVALID_ARGUMENT naming the flag otherwise.
absl::Status ApplyLogFormatFlag();

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_SERVER_FLAGS_H_
