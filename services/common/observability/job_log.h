// The servers' log: spdlog's default logger, in text or as JSON lines (--log_format), and
// the lines about a job. Every line about a job carries the job's id and, where known,
// the worker's id and its rank: in text as a prefix "[job-000001-ab worker w-2 rank 0] ",
// in JSON as the fields job, worker and rank beside ts, level and msg. Each line about a
// job also goes to the process's tap: the coordinator keeps it in the job's log
// (JobService.WatchLogs), a worker ships it with its next heartbeat.
//
// Thread safety: SetLogFormat and SetLogTap once in main, before other threads log;
// LogJob from any thread.
#ifndef LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_JOB_LOG_H_
#define LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_JOB_LOG_H_

#include <spdlog/spdlog.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "lockstep/v1/job.pb.h"

namespace lockstep {

enum class LogFormat { kText, kJson };

// "text" or "json"; INVALID_ARGUMENT naming log_format otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(std::string_view name);
// Formats the default logger's lines (JSON: {"ts", "level", "msg"[, "job", "worker", "rank"]}).
void SetLogFormat(LogFormat format);

// What a line is about.
struct JobContext {
  std::string job;
  std::string worker;  // "" when not about one worker
  int rank = -1;       // -1 when unknown
};

// Receives every line about a job, on the thread that logs it: it must be quick and take
// only leaf locks. `source` is left empty for the tap to fill.
using LogTap = std::function<void(const v1::LogLine& line)>;
void SetLogTap(LogTap tap);

// This process's worker id (a worker's, once registered): the `worker` of its lines
// about jobs that name none.
void SetLogWorkerId(std::string id);

// Logs `msg` about a job (see the top of the file).
void LogJob(spdlog::level::level_enum level, const JobContext& about, std::string_view msg);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_JOB_LOG_H_
