// Tests of StepHistory: every step up to the budget, then the even thinning (which steps,
// whatever the order of calls), replays, and its file with digests (a flipped byte found).
#include "services/coordinator/storage/step_history.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/testing.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using ::lockstep::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

v1::JobEvent Step(int64_t step, bool replay = false) {
  v1::JobEvent e;
  e.mutable_step()->set_step(step);
  e.mutable_step()->set_epoch(step / 10);
  e.mutable_step()->set_total_steps(100);
  e.mutable_step()->set_loss(1.0f / static_cast<float>(step));
  e.mutable_step()->set_accuracy(0.5f);
  e.mutable_step()->set_replay(replay);
  e.set_unix_ms(1000 + step);
  return e;
}

std::vector<int64_t> Steps(const StepHistory& h) {
  std::vector<int64_t> steps;
  for (const v1::JobEvent& e : h.Events()) steps.push_back(e.step().step());
  return steps;
}

TEST(StepHistory, KeepsEveryStepUpToTheBudget) {
  StepHistory h(8);
  for (int64_t s = 1; s <= 8; ++s) h.Add(Step(s));
  EXPECT_THAT(Steps(h), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
  EXPECT_EQ(h.stride(), 1);
  const v1::JobEvent e = h.Events()[2];
  EXPECT_EQ(e.step().epoch(), 0);
  EXPECT_EQ(e.step().loss(), 1.0f / 3);
  EXPECT_EQ(e.step().total_steps(), 100);
  EXPECT_EQ(e.unix_ms(), 1003);
}

TEST(StepHistory, PastTheBudgetKeepsMultiplesOfAPowerOfTwoAndTheNewestStep) {
  StepHistory h(8);
  for (int64_t s = 1; s <= 9; ++s) h.Add(Step(s));
  EXPECT_THAT(Steps(h), ElementsAre(2, 4, 6, 8, 9));
  for (int64_t s = 10; s <= 37; ++s) h.Add(Step(s));
  EXPECT_EQ(h.stride(), 8);
  EXPECT_THAT(Steps(h), ElementsAre(8, 16, 24, 32, 37));
  EXPECT_LE(h.size(), 8u);
  // 1,000 steps in a budget of 100: every 16th (62 points) and the last.
  StepHistory big(100);
  for (int64_t s = 1; s <= 1000; ++s) big.Add(Step(s));
  EXPECT_EQ(big.stride(), 16);
  EXPECT_EQ(big.size(), 63u);
  EXPECT_EQ(Steps(big).back(), 1000);
}

TEST(StepHistory, AReplayReplacesWhatWasKeptFromItsStepOn) {
  StepHistory h(100);
  for (int64_t s = 1; s <= 10; ++s) h.Add(Step(s));
  // Resumed from the snapshot at step 6: steps 7.. run again.
  h.Add(Step(7, /*replay=*/true));
  EXPECT_THAT(Steps(h), ElementsAre(1, 2, 3, 4, 5, 6, 7));
  EXPECT_FALSE(h.Events().back().step().replay());
}

TEST(StepHistory, ItsFileRoundTripsAndAFlippedByteIsDataLossNamingIt) {
  const fs::path dir =
      fs::temp_directory_path() / ("step_history_test." + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "job.steps.safetensors").string();
  StepHistory h(8);
  for (int64_t s = 1; s <= 21; ++s) h.Add(Step(s));
  ASSERT_OK(h.Write(path));
  ASSERT_OK_AND_ASSIGN(StepHistory read, StepHistory::Read(path, 8));
  EXPECT_THAT(Steps(read), ElementsAreArray(Steps(h)));
  EXPECT_EQ(read.stride(), h.stride());
  EXPECT_EQ(read.Events().back().step().loss(), 1.0f / 21);
  // It goes on thinning where it was: step 22 drops 21 (not a multiple of 4).
  read.Add(Step(22));
  h.Add(Step(22));
  EXPECT_THAT(Steps(read), ElementsAreArray(Steps(h)));
  // Read with a smaller budget: thinned to it.
  ASSERT_OK_AND_ASSIGN(StepHistory small, StepHistory::Read(path, 3));
  EXPECT_LE(small.size(), 3u);

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
  }
  // In the header (its kind's value), in the first tensor's bytes and in the last's.
  const size_t header_end =
      8 + static_cast<uint8_t>(bytes[0]) + 256 * static_cast<uint8_t>(bytes[1]);
  for (size_t at : {bytes.find("step_history"), header_end + 5, bytes.size() - 3}) {
    std::string flipped = bytes;
    flipped[at] ^= 0x10;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << flipped;
    EXPECT_THAT(StepHistory::Read(path, 8), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)))
        << "flipped byte " << at;
  }
  EXPECT_THAT(StepHistory::Read((dir / "none").string(), 8),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("none")));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lockstep
