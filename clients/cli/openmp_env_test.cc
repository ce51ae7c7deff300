// The OpenMP wait settings the CLI hands to the programs it starts, and that a user's own
// choice (either variable) is kept.
#include "clients/cli/openmp_env.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace lockstep::cli {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "(unset)" : v;
}

class OpenMpEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
  }
  void TearDown() override { SetUp(); }
};

TEST_F(OpenMpEnvTest, TrainingBoundsTheSpinning) {
  BoundOpenMpSpinning();
  EXPECT_EQ(Env("GOMP_SPINCOUNT"), "10000");
  EXPECT_EQ(Env("OMP_WAIT_POLICY"), "(unset)");
}

TEST_F(OpenMpEnvTest, ASharedHostSleeps) {
  SleepOpenMpWaits();
  EXPECT_EQ(Env("OMP_WAIT_POLICY"), "passive");
  EXPECT_EQ(Env("GOMP_SPINCOUNT"), "(unset)");
}

TEST_F(OpenMpEnvTest, TheUsersChoiceIsKept) {
  setenv("OMP_WAIT_POLICY", "active", 1);
  BoundOpenMpSpinning();
  SleepOpenMpWaits();
  EXPECT_EQ(Env("OMP_WAIT_POLICY"), "active");
  EXPECT_EQ(Env("GOMP_SPINCOUNT"), "(unset)");

  SetUp();
  setenv("GOMP_SPINCOUNT", "500", 1);
  BoundOpenMpSpinning();
  SleepOpenMpWaits();
  EXPECT_EQ(Env("GOMP_SPINCOUNT"), "500");
  EXPECT_EQ(Env("OMP_WAIT_POLICY"), "(unset)");
}

}  // namespace
}  // namespace lockstep::cli
