// The observability flags both Lockstep servers take: the metrics listener, its port file, the log
// format. Contract: server_flags.h.
#include "services/common/observability/server_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "services/common/observability/job_log.h"
#include "services/common/observability/whole_line_sink.h"

ABSL_FLAG(std::string, metrics_listen, "",
          "host:port to serve Prometheus metrics on, plain HTTP without tokens (port 0: pick "
          "one; empty: off). Keep it on loopback or a private network");
ABSL_FLAG(std::string, metrics_port_file, "",
          "write the metrics port actually bound here (for --metrics_listen with port 0)");
ABSL_FLAG(std::string, log_format, "text",
          "text, or json: one JSON object a line (ts, level, msg; job, worker, rank on lines "
          "about a job)");

namespace lockstep {

MetricsFlags GetMetricsFlags() {
  return {absl::GetFlag(FLAGS_metrics_listen), absl::GetFlag(FLAGS_metrics_port_file)};
}

absl::Status ApplyLogFormatFlag() {
  absl::StatusOr<LogFormat> format = ParseLogFormat(absl::GetFlag(FLAGS_log_format));
  if (!format.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", format.status().message()));
  }
  UseWholeLineLogger();  // a full disk leaves no torn line, and logging resumes after it
  SetLogFormat(*format);
  return absl::OkStatus();
}

}  // namespace lockstep
