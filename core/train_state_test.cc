#include "core/train_state.h"

#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

TEST(TrainState, BytesRoundTrip) {
  TrainState s;
  s.step = 7;
  s.params = {1.5f, -2.0f, 3.25f};
  s.slots = {{0.1f, 0.2f, 0.3f}, {4.0f, 5.0f, 6.0f}};
  const std::string bytes = StateBytes(s);
  EXPECT_EQ(bytes.size(), 9 * sizeof(float));
  ASSERT_OK_AND_ASSIGN(TrainState back, StateFromBytes(bytes, 7, 3, 2));
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.params, s.params);
  EXPECT_EQ(back.slots, s.slots);
  EXPECT_EQ(ParamChecksum(back.params), ParamChecksum(s.params));
}

TEST(TrainState, WrongSizeNamesBothSizes) {
  const std::string bytes(10 * sizeof(float), '\0');
  EXPECT_THAT(StateFromBytes(bytes, 0, 3, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("train state has 40 bytes; 3 params and 2 optimizer slots "
                                 "need 36")));
  // Sizes whose product would overflow are refused, not wrapped.
  EXPECT_THAT(StateFromBytes(bytes, 0, uint64_t{1} << 62, 0xffffffffu),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("train state has 40 bytes")));
}

}  // namespace
}  // namespace lockstep
