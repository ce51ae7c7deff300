// WholeLineSink: lines a full disk refuses are counted, not torn, and logging resumes once
// there is room, saying how many were lost (on /dev/full, and on a tiny tmpfs).
#include "services/common/observability/whole_line_sink.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "core/io/tmpfs_testing.h"
#include "core/testing.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

TEST(WholeLineSink, EveryLineRefusedByAFullDeviceIsCounted) {
  const int fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto sink = std::make_shared<WholeLineSink>(fd);
  spdlog::logger logger("t", sink);
  for (int i = 0; i < 5; ++i) logger.info("line {}", i);
  EXPECT_EQ(sink->lost(), 5);
  close(fd);
}

TEST(WholeLineSink, OnATinyTmpfsLinesResumeWholeAfterENOSPC) {
  TinyTmpfs disk(64 * 1024);
  LOCKSTEP_SKIP_WITHOUT_TMPFS(disk);
  const std::string path = disk.dir() + "/log";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);  // as `>`
  ASSERT_GE(fd, 0);
  auto sink = std::make_shared<WholeLineSink>(fd);
  spdlog::logger logger("t", sink);
  logger.set_pattern("[%l] %v");
  logger.info("before");
  disk.Fill();
  for (int i = 0; i < 500; ++i) logger.info("during the full disk, line {}", i);
  EXPECT_GT(sink->lost(), 0);
  disk.Free();
  logger.info("after");
  EXPECT_EQ(sink->lost(), 0);
  close(fd);
  const std::string text = ReadAll(path);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(line, "[info] ") || absl::StartsWith(line, "[log] ")) << line;
  }
  EXPECT_THAT(text, HasSubstr("lines were lost: No space left on device\n[info] after\n"));
}

}  // namespace
}  // namespace lockstep::testing
