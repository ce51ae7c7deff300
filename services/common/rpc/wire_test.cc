// A TrainState through StateChunks: WriteStateChunks' stream rebuilt by
// StateChunkAssembler, and the streams it refuses.
#include "services/common/rpc/wire.h"

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

TEST(StepWire, TheAuditsFieldsTravelBothWays) {
  const std::vector<int32_t> idx = {1, 2, 3}, audit_idx = {7, 8, 9};
  StepCommand c{.step = 4, .key = {1, 2}, .indices = idx};
  c.want_grad_digest = true;
  c.audit = true;
  c.audit_indices = audit_idx;
  c.audit_key = {5, 6};
  const v1::StepRequest request = ToProto("job", c);
  std::vector<rng::Key> keys;
  const StepCommand back = FromProto(request, &keys);
  EXPECT_TRUE(back.want_grad_digest);
  EXPECT_TRUE(back.audit);
  EXPECT_EQ(std::vector<int32_t>(back.audit_indices.begin(), back.audit_indices.end()), audit_idx);
  EXPECT_EQ(back.audit_key.k0, 5u);
  EXPECT_EQ(back.audit_key.k1, 6u);
  EXPECT_FALSE(FromProto(ToProto("job", StepCommand{.step = 4, .indices = idx}), &keys).audit);

  StepResult r;
  r.grad_digest = 0x1234567890abcdefull;
  r.audited = true;
  r.audit_digest = 0xfedcba0987654321ull;
  r.audit_loss = 0.25f;
  r.stats_digest = 0x0123456789abcdefull;
  r.audit_stats_digest = 0x0fedcba987654321ull;
  const StepResult got = FromProto(ToProto(r));
  EXPECT_EQ(got.grad_digest, r.grad_digest);
  EXPECT_TRUE(got.audited);
  EXPECT_EQ(got.audit_digest, r.audit_digest);
  EXPECT_EQ(got.audit_loss, 0.25f);
  EXPECT_EQ(got.stats_digest, r.stats_digest);
  EXPECT_EQ(got.audit_stats_digest, r.audit_stats_digest);
}

TEST(StepWire, TheEpochsDataKeyTravels) {
  const std::vector<int32_t> idx = {1};
  StepCommand c{.step = 4, .indices = idx};
  c.data_key = {0x89abcdefu, 7};
  std::vector<rng::Key> keys;
  EXPECT_EQ(FromProto(ToProto("job", c), &keys).data_key, (rng::Key{0x89abcdefu, 7}));
}

TEST(StepWire, LogicalReplicasKeysAndLossesTravelBothWays) {
  const std::vector<int32_t> idx = {1, 2, 3, 4};
  const std::vector<rng::Key> keys = {{1, 2}, {3, 4}};
  StepCommand c{.step = 4, .indices = idx};
  c.keys = keys;
  std::vector<rng::Key> storage = {{9, 9}};  // replaced
  const StepCommand back = FromProto(ToProto("job", c), &storage);
  EXPECT_EQ(std::vector<rng::Key>(back.keys.begin(), back.keys.end()), keys);
  EXPECT_TRUE(
      FromProto(ToProto("job", StepCommand{.step = 4, .indices = idx}), &storage).keys.empty());

  StepResult r;
  r.replica_losses = {0.5f, 0.25f};
  r.replica_accuracies = {1.0f, 0.0f};
  const StepResult got = FromProto(ToProto(r));
  EXPECT_EQ(got.replica_losses, r.replica_losses);
  EXPECT_EQ(got.replica_accuracies, r.replica_accuracies);

  JobAssignment job;
  job.replica.logical_replicas = 4;
  job.replica.logical_first = 1;
  job.replica.logical_count = 2;
  const JobAssignment job_back = FromProto(ToProto(job));
  EXPECT_EQ(job_back.replica.logical_replicas, 4);
  EXPECT_EQ(job_back.replica.logical_first, 1);
  EXPECT_EQ(job_back.replica.logical_count, 2);
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
