// A TrainState through StateChunks: WriteStateChunks' stream rebuilt by
// StateChunkAssembler, and the streams it refuses.
#include "services/common/wire.h"

#include <vector>

#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

std::vector<v1::StateChunk> Chunks(const TrainState& state) {
  std::vector<v1::StateChunk> chunks;
  const StateHeader header{state.step, state.params.size(),
                           static_cast<uint32_t>(state.slots.size())};
  WriteStateChunks(header, StateBytes(state), [&](const v1::StateChunk& c) {
    chunks.push_back(c);
    return true;
  });
  return chunks;
}

TEST(StateChunkAssembler, RebuildsWhatWriteStateChunksSent) {
  TrainState s;
  s.step = 5;
  s.params.assign(kStateChunkBytes / sizeof(float) + 3, 1.5f);  // two chunks
  s.slots = {std::vector<float>(s.params.size(), -2.0f)};
  const std::vector<v1::StateChunk> chunks = Chunks(s);
  ASSERT_EQ(chunks.size(), 3u);
  StateChunkAssembler a;
  for (const v1::StateChunk& c : chunks) ASSERT_OK(a.Add(c));
  ASSERT_OK_AND_ASSIGN(TrainState back, std::move(a).Finish());
  EXPECT_EQ(back.step, 5);
  EXPECT_EQ(back.params, s.params);
  EXPECT_EQ(back.slots, s.slots);
}

TEST(StateChunkAssembler, RefusesAStreamOutOfShape) {
  TrainState s;
  s.params = {1, 2};
  const std::vector<v1::StateChunk> chunks = Chunks(s);
  ASSERT_EQ(chunks.size(), 1u);

  StateChunkAssembler no_header;
  v1::StateChunk data_only = chunks[0];
  data_only.clear_header();
  EXPECT_THAT(no_header.Add(data_only),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("carries no header")));

  StateChunkAssembler two_headers;
  ASSERT_OK(two_headers.Add(chunks[0]));
  EXPECT_THAT(two_headers.Add(chunks[0]),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("only the first")));

  EXPECT_THAT(StateChunkAssembler().Finish(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("no state arrived")));
  StateChunkAssembler short_state;
  v1::StateChunk header_only = chunks[0];
  header_only.clear_data();
  ASSERT_OK(short_state.Add(header_only));
  EXPECT_THAT(std::move(short_state).Finish(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("0 bytes arrived")));
}

}  // namespace
}  // namespace lockstep
