#include "services/coordinator/storage/witness.h"

#include <gtest/gtest.h>

namespace lockstep {
namespace {

std::vector<int64_t> Steps(const std::vector<v1::SnapshotMark>& marks) {
  std::vector<int64_t> out;
  for (const auto& m : marks) out.push_back(m.step());
  return out;
}

TEST(WitnessTest, KeepsEachSnapshotInStepOrder) {
  std::vector<v1::SnapshotMark> marks;
  AddWitnessMark(marks, 10, 0xa, 1);
  AddWitnessMark(marks, 20, 0xb, 2);
  EXPECT_EQ(Steps(marks), (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(marks[1].param_checksum(), 0xbu);
  EXPECT_EQ(marks[1].unix_ms(), 2);
}

TEST(WitnessTest, AReplayReplacesTheMarksFromItsStepOn) {
  std::vector<v1::SnapshotMark> marks;
  for (int64_t s : {10, 20, 30}) AddWitnessMark(marks, s, s, s);
  AddWitnessMark(marks, 20, 99, 40);  // recovered from step 10, snapshot at 20 again
  EXPECT_EQ(Steps(marks), (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(marks[1].param_checksum(), 99u);
}

TEST(WitnessTest, KeepsTheNewestWithinTheBound) {
  std::vector<v1::SnapshotMark> marks;
  for (size_t s = 1; s <= kMaxWitnessMarks + 5; ++s) AddWitnessMark(marks, s, s, s);
  ASSERT_EQ(marks.size(), kMaxWitnessMarks);
  EXPECT_EQ(marks.front().step(), 6);
  EXPECT_EQ(marks.back().step(), static_cast<int64_t>(kMaxWitnessMarks + 5));
}

}  // namespace
}  // namespace lockstep
