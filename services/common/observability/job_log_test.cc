#include "services/common/observability/job_log.h"

#include <spdlog/sinks/ostream_sink.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/testing.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

// The default logger, writing into `out` while it lives; the old one back after.
class CapturedLog {
 public:
  explicit CapturedLog(LogFormat format) : old_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
    SetLogFormat(format);
  }
  ~CapturedLog() {
    spdlog::set_default_logger(old_);
    SetLogTap(nullptr);
    SetLogWorkerId("");
  }
  std::vector<nlohmann::json> JsonLines() const {
    std::vector<nlohmann::json> out;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> old_;
};

TEST(JobLog, JsonLinesCarryTheJobWorkerAndRankWhereKnown) {
  CapturedLog log(LogFormat::kJson);
  spdlog::info("serving on port {}", 7070);
  LogJob(spdlog::level::info, {"job-000001-ab"}, "QUEUED");
  LogJob(spdlog::level::err, {"job-000001-ab", "w-3", 1}, "step 4: \"quoted\"\nnewline");
  const std::vector<nlohmann::json> lines = log.JsonLines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["msg"], "serving on port 7070");
  EXPECT_EQ(lines[0]["level"], "info");
  EXPECT_FALSE(lines[0].contains("job"));
  EXPECT_THAT(lines[0]["ts"].get<std::string>(),
              ::testing::MatchesRegex("20[0-9-]+T[0-9:]+\\.[0-9]{3}Z"));
  EXPECT_EQ(lines[1]["job"], "job-000001-ab");
  EXPECT_EQ(lines[1]["msg"], "QUEUED");
  EXPECT_FALSE(lines[1].contains("worker") || lines[1].contains("rank"));
  EXPECT_EQ(lines[2]["level"], "error");
  EXPECT_EQ(lines[2]["job"], "job-000001-ab");
  EXPECT_EQ(lines[2]["worker"], "w-3");
  EXPECT_EQ(lines[2]["rank"], 1);
  EXPECT_EQ(lines[2]["msg"], "step 4: \"quoted\"\nnewline");
}

TEST(JobLog, TextLinesStartWithTheJobWorkerAndRank) {
  CapturedLog log(LogFormat::kText);
  SetLogWorkerId("w-7");  // a worker's own lines name it
  LogJob(spdlog::level::info, {"job-000002-cd", "", 0}, "prepared");
  EXPECT_THAT(log.text(), HasSubstr("[job-000002-cd worker w-7 rank 0] prepared"));
}

TEST(JobLog, TheTapGetsEveryLineAboutAJob) {
  CapturedLog log(LogFormat::kText);
  std::vector<v1::LogLine> tapped;
  SetLogTap([&tapped](const v1::LogLine& line) { tapped.push_back(line); });
  spdlog::info("not about a job");
  LogJob(spdlog::level::warn, {"job-1", "w-1", 2}, "slow");
  LogJob(spdlog::level::info, {"job-1"}, "SUCCEEDED");
  ASSERT_EQ(tapped.size(), 2u);
  EXPECT_EQ(tapped[0].job(), "job-1");
  EXPECT_EQ(tapped[0].worker(), "w-1");
  EXPECT_EQ(tapped[0].rank(), 2);
  EXPECT_EQ(tapped[0].level(), "warning");
  EXPECT_EQ(tapped[0].message(), "slow");
  EXPECT_GT(tapped[0].unix_ms(), 0);
  EXPECT_FALSE(tapped[1].has_rank());
  EXPECT_TRUE(tapped[1].worker().empty());
}

TEST(JobLog, ParsesTheFormatFlag) {
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_THAT(ParseLogFormat("xml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("log_format")));
}

}  // namespace
}  // namespace lockstep::testing
