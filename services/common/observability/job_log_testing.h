// For tests of what a job's log says: the lines this process logs about jobs (SetLogTap),
// captured while the capture lives. One at a time, as there is one tap.
#ifndef LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_JOB_LOG_TESTING_H_
#define LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_JOB_LOG_TESTING_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "lockstep/v1/job.pb.h"
#include "services/common/observability/job_log.h"

namespace lockstep::testing {

// Thread-safe: lines come on whichever thread logs them.
class LogCapture {
 public:
  // Captures the lines of `level` ("warning", ...), or of every level when empty.
  explicit LogCapture(std::string level = "") : level_(std::move(level)) {
    SetLogTap([this](const v1::LogLine& line) {
      if (!level_.empty() && line.level() != level_) return;
      absl::MutexLock lock(&mu_);
      lines_.push_back(line);
    });
  }
  ~LogCapture() { SetLogTap(nullptr); }  // before the lines go, however the test ends
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // The lines captured since the start or the last Clear.
  std::vector<v1::LogLine> lines() const {
    absl::MutexLock lock(&mu_);
    return lines_;
  }
  void Clear() {
    absl::MutexLock lock(&mu_);
    lines_.clear();
  }

 private:
  const std::string level_;
  mutable absl::Mutex mu_;
  std::vector<v1::LogLine> lines_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep::testing

#endif  // LOCKSTEP_SERVICES_COMMON_OBSERVABILITY_JOB_LOG_TESTING_H_
