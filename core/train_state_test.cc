#include "core/train_state.h"

#include "core/optimizer_spec.h"
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
  ASSERT_OK_AND_ASSIGN(TrainState back, StateFromBytes(bytes, {7, 3, 2}));
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.params, s.params);
  EXPECT_EQ(back.slots, s.slots);
  EXPECT_EQ(ParamChecksum(back.params), ParamChecksum(s.params));
}

TEST(TrainState, WrongSizeNamesBothSizes) {
  const std::string bytes(10 * sizeof(float), '\0');
  EXPECT_THAT(StateFromBytes(bytes, {0, 3, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("train state has 40 bytes; 3 params, 2 optimizer slots "
                                 "and 0 batch stats need 36")));
  // Sizes whose product would overflow are refused, not wrapped.
  EXPECT_THAT(StateFromBytes(bytes, {0, uint64_t{1} << 62, 0xffffffffu}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("train state has 40 bytes")));
}

TEST(TrainState, InitialBytesAreTheParamsThenZeroSlots) {
  const std::vector<float> params = {1.5f, -2.0f};
  TrainState want;
  want.params = params;
  want.slots = {{0, 0}, {0, 0}};
  EXPECT_EQ(InitialStateBytes(params, 2), StateBytes(want));
}

TEST(StateAssembler, BuildsTheStateFromChunksOfAnySize) {
  TrainState s;
  s.step = 3;
  s.params = {1, 2, 3};
  s.slots = {{4, 5, 6}};
  const std::string bytes = StateBytes(s);
  for (size_t chunk : {size_t{1}, size_t{5}, size_t{12}, bytes.size()}) {
    ASSERT_OK_AND_ASSIGN(StateAssembler a, StateAssembler::Create({3, 3, 1}));
    for (size_t off = 0; off < bytes.size(); off += chunk) {
      ASSERT_OK(a.Append(std::string_view(bytes).substr(off, chunk)));
    }
    ASSERT_OK_AND_ASSIGN(TrainState back, std::move(a).Finish());
    EXPECT_EQ(back.step, 3);
    EXPECT_EQ(back.params, s.params);
    EXPECT_EQ(back.slots, s.slots);
  }
}

TEST(TrainState, BatchStatsFollowTheSlotsInBytesAndChecksum) {
  TrainState s = TrainState::Create({1, 2}, *OptimizerFromSpec([] {
                                      v1::OptimizerSpec o;
                                      o.set_kind("adam");
                                      o.set_learning_rate(0.1);
                                      return o;
                                    }()),
                                    {0.5f, 0.25f, 0.125f});
  s.slots[1] = {7, 8};
  const std::string bytes = StateBytes(s);
  EXPECT_EQ(bytes.size(), 9 * sizeof(float));
  EXPECT_EQ(InitialStateBytes(s.params, 2, s.batch_stats).substr(6 * sizeof(float)),
            bytes.substr(6 * sizeof(float)));
  for (size_t chunk : {size_t{1}, size_t{7}, bytes.size()}) {
    StateHeader h{0, 2, 2, 3};
    ASSERT_OK_AND_ASSIGN(StateAssembler a, StateAssembler::Create(h));
    for (size_t off = 0; off < bytes.size(); off += chunk) {
      ASSERT_OK(a.Append(std::string_view(bytes).substr(off, chunk)));
    }
    ASSERT_OK_AND_ASSIGN(TrainState back, std::move(a).Finish());
    EXPECT_EQ(back.params, s.params);
    EXPECT_EQ(back.slots, s.slots);
    EXPECT_EQ(back.batch_stats, s.batch_stats);
  }
  EXPECT_THAT(StateFromBytes(bytes, {0, 2, 2, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2 batch stats need 32")));
  // The checksum continues over the stats: without any it is the params' alone.
  EXPECT_NE(ParamChecksum(s.params, s.batch_stats), ParamChecksum(s.params));
  EXPECT_EQ(ParamChecksum(s.params, {}), ParamChecksum(s.params));
  std::vector<float> both = {1, 2, 0.5f, 0.25f, 0.125f};
  EXPECT_EQ(ParamChecksum(s.params, s.batch_stats), ParamChecksum(both));
}

TEST(StateAssembler, TooManyOrTooFewBytesAreDataLoss) {
  ASSERT_OK_AND_ASSIGN(StateAssembler a, StateAssembler::Create({0, 2, 0}));
  EXPECT_THAT(a.Append(std::string(9, 'x')),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("the header announced 8")));
  ASSERT_OK(a.Append(std::string(4, 'x')));
  EXPECT_THAT(std::move(a).Finish(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("4 bytes arrived")));
  EXPECT_THAT(StateAssembler::Create({0, uint64_t{1} << 62, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exceeds the limit")));
}

// A header is a peer's word: memory follows the bytes that arrive (a FetchState header
// announcing 2^36 params and 4 billion slots once made the coordinator allocate them).
TEST(StateAssembler, AllocatesWhatArrivesNotWhatTheHeaderAnnounces) {
  ASSERT_OK_AND_ASSIGN(StateAssembler a, StateAssembler::Create({0, uint64_t{1} << 36, 2}));
  ASSERT_OK(a.Append(std::string(6, '\0')));
  EXPECT_THAT(std::move(a).Finish(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("6 bytes arrived")));
  EXPECT_THAT(StateAssembler::Create({0, 0, 4'000'000'000u}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 16")));
}

}  // namespace
}  // namespace lockstep
