#include "services/common/flags.h"

#include <cstdlib>

#include "absl/flags/flag.h"
#include "core/testing.h"

ABSL_FLAG(std::string, flags_test_color, "red", "a flag of this test");
ABSL_FLAG(int, flags_test_count, 1, "another");

namespace lockstep::testing {
namespace {

using ::testing::Contains;
using ::testing::Not;

TEST(FlagsTest, EveryFlagOfTheProgramReadsItsEnvironmentVariableAndTheCommandLineWins) {
  EXPECT_EQ(FlagEnvName("max_jobs_kept_per_user"), "LOCKSTEP_MAX_JOBS_KEPT_PER_USER");
  const std::vector<std::string> names = EnvFlagNames();
  EXPECT_THAT(names, Contains("flags_test_color"));
  EXPECT_THAT(names, Contains("tls_ca"));          // server_security.cc's
  EXPECT_THAT(names, Contains("metrics_listen"));  // server_flags.cc's
  EXPECT_THAT(names, Not(Contains("flagfile")));   // absl's own

  setenv("LOCKSTEP_FLAGS_TEST_COLOR", "blue", 1);
  setenv("LOCKSTEP_FLAGS_TEST_COUNT", "5", 1);
  setenv("LOCKSTEP_FLAGFILE", "/nonexistent/flags", 1);  // not read: parsing would fail
  char prog[] = "prog", count[] = "--flags_test_count=3", positional[] = "extra";
  char* argv[] = {prog, count, positional};
  std::vector<char*> rest = ParseFlagsWithEnv(3, argv);
  EXPECT_EQ(absl::GetFlag(FLAGS_flags_test_color), "blue");
  EXPECT_EQ(absl::GetFlag(FLAGS_flags_test_count), 3);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_STREQ(rest[1], "extra");
}

}  // namespace
}  // namespace lockstep::testing
