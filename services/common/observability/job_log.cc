// The servers' log: spdlog's default logger, in text or as JSON lines (--log_format), and the lines
// about a job. Contract: job_log.h.
#include "services/common/observability/job_log.h"

#include <spdlog/pattern_formatter.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace lockstep {
namespace {

// The line being logged by LogJob on this thread, for the JSON formatter: spdlog formats
// on the logging thread (the default logger is synchronous).
thread_local const JobContext* current_about = nullptr;
thread_local std::string_view current_msg;

absl::Mutex tap_mu;
std::shared_ptr<const LogTap>& Tap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tap_mu) {
  static auto* tap = new std::shared_ptr<const LogTap>();
  return *tap;
}

std::string& WorkerId() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tap_mu) {
  static auto* id = new std::string();
  return *id;
}

std::string LevelName(spdlog::level::level_enum level) {
  const auto name = spdlog::level::to_string_view(level);
  return std::string(name.data(), name.size());
}

std::string TextPrefix(const JobContext& about) {
  std::string out = absl::StrCat("[", about.job);
  if (!about.worker.empty()) absl::StrAppend(&out, " worker ", about.worker);
  if (about.rank >= 0) absl::StrAppend(&out, " rank ", about.rank);
  return out + "] ";
}

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    nlohmann::ordered_json line;
    line["ts"] =
        absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromChrono(msg.time), absl::UTCTimeZone());
    line["level"] = LevelName(msg.level);
    if (current_about != nullptr) {
      line["msg"] = std::string(current_msg);
      line["job"] = current_about->job;
      if (!current_about->worker.empty()) line["worker"] = current_about->worker;
      if (current_about->rank >= 0) line["rank"] = current_about->rank;
    } else {
      line["msg"] = std::string(msg.payload.data(), msg.payload.size());
    }
    const std::string text =
        line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("log_format: \"", std::string(name), "\" is not one of text, json"));
}

void SetLogFormat(LogFormat format) {
  if (format == LogFormat::kJson) {
    spdlog::set_formatter(std::make_unique<JsonFormatter>());
  } else {
    spdlog::set_formatter(std::make_unique<spdlog::pattern_formatter>());
  }
}

void SetLogTap(LogTap tap) {
  absl::MutexLock lock(&tap_mu);
  Tap() = tap ? std::make_shared<const LogTap>(std::move(tap)) : nullptr;
}

void SetLogWorkerId(std::string id) {
  absl::MutexLock lock(&tap_mu);
  WorkerId() = std::move(id);
}

void LogJob(spdlog::level::level_enum level, const JobContext& in, std::string_view msg) {
  std::shared_ptr<const LogTap> tap;
  JobContext about = in;
  {
    absl::MutexLock lock(&tap_mu);
    tap = Tap();
    if (about.worker.empty()) about.worker = WorkerId();
  }
  current_about = &about;
  current_msg = msg;
  spdlog::log(level, "{}{}", TextPrefix(about), msg);
  current_about = nullptr;
  if (tap == nullptr) return;
  v1::LogLine line;
  line.set_unix_ms(absl::ToUnixMillis(absl::Now()));
  line.set_level(LevelName(level));
  line.set_job(about.job);
  line.set_worker(about.worker);
  if (about.rank >= 0) line.set_rank(about.rank);
  line.set_message(std::string(msg));
  (*tap)(line);
}

}  // namespace lockstep
