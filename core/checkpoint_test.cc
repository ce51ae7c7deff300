// Checkpoints and starting points: a train state round-trips bitwise with its metadata
// (BatchNorm's batch_stats under Flax's names too), a params-only file (either naming)
// starts at step 0 with a fresh optimizer state, and a file for another model is refused
// naming the tensor.
#include "core/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/io/safetensors.h"
#include "core/io/safetensors_testing.h"
#include "core/plan.h"
#include "core/spec/spec.h"
#include "core/spec/testing.h"
#include "core/testing.h"

namespace lockstep::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("lockstep-checkpoint-" + std::to_string(getpid())))
               .string();
    std::filesystem::create_directories(dir_);
    auto setup = SetupFromSpec(SmallMlpSpec());
    ASSERT_OK(setup.status());
    setup_.emplace(std::move(setup).value());
    state_ =
        TrainState::Create(setup_->model.Init(TrainingPlan::InitKey(3, setup_->impl), setup_->impl),
                           setup_->optimizer);
    state_.step = 17;
    for (size_t k = 0; k < state_.slots.size(); ++k) {
      for (size_t i = 0; i < state_.slots[k].size(); ++i) state_.slots[k][i] = 1e-4f * i + k;
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A params-only file as Python writes one: flatten_dict(tree, sep=".") of `tree`.
  std::string WriteParamsOnly(const std::string& prefix) {
    SafeTensors st;
    for (const ParamEntry& e : setup_->model.layout().entries()) {
      std::string name = prefix + e.name;
      for (char& c : name) c = c == '/' ? '.' : c;
      st.AddF32(name, e.shape, std::span<const float>(state_.params.data() + e.offset, e.size));
    }
    const std::string path = dir_ + "/params-" + std::to_string(prefix.size()) + ".safetensors";
    EXPECT_THAT(st.Write(path), IsOk());
    return path;
  }

  std::string dir_;
  std::optional<TrainSetup> setup_;
  TrainState state_;
};

TEST_F(CheckpointTest, ATrainStateRoundTripsBitwiseWithItsMetadata) {
  const std::string path = dir_ + "/state.safetensors";
  ASSERT_OK(WriteCheckpoint(path, setup_->model, setup_->optimizer, state_, {{"main_key", "ab"}}));
  ASSERT_OK_AND_ASSIGN(StartingPoint start,
                       ReadStartingPoint(path, setup_->model, setup_->optimizer));
  EXPECT_FALSE(start.params_only);
  EXPECT_EQ(start.state.step, 17);
  EXPECT_TRUE(start.state.params == state_.params);
  EXPECT_TRUE(start.state.slots == state_.slots);
  EXPECT_EQ(start.metadata["main_key"], "ab");
}

TEST_F(CheckpointTest, ParamsOnlyStartAtStepZeroWithAFreshOptimizerState) {
  const TrainState fresh = TrainState::Create(state_.params, setup_->optimizer);
  for (const std::string prefix : {"params.", ""}) {
    ASSERT_OK_AND_ASSIGN(StartingPoint start, ReadStartingPoint(WriteParamsOnly(prefix),
                                                                setup_->model, setup_->optimizer));
    EXPECT_TRUE(start.params_only) << prefix;
    EXPECT_EQ(start.state.step, 0);
    EXPECT_TRUE(start.state.params == state_.params) << prefix;
    EXPECT_TRUE(start.state.slots == fresh.slots) << prefix;
  }
}

TEST_F(CheckpointTest, AFileForAnotherModelIsRefusedNamingTheTensor) {
  const std::string path = WriteParamsOnly("params.");
  ASSERT_OK_AND_ASSIGN(TrainSetup other, SetupFromSpec(ValidSpec(R"(
model: {kind: mlp, hidden: [64]}
optimizer: {kind: adam, learning_rate: 0.001}
global_batch_size: 32
steps: 1
)")));
  EXPECT_THAT(ReadStartingPoint(path, other.model, other.optimizer),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(path)));
  EXPECT_THAT(ReadStartingPoint(dir_ + "/missing.safetensors", other.model, other.optimizer),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.safetensors")));
}

TEST_F(CheckpointTest, BatchStatsRoundTripUnderFlaxNamesAndParamsOnlyStartsGetInit) {
  ASSERT_OK_AND_ASSIGN(TrainSetup bn, SetupFromSpec(ValidSpec(R"(
model: {layers: [flatten, dense: {features: 8}, batch_norm: {momentum: 0.9}, relu,
                 dense: {features: 10}, batch_norm: {use_scale: false}]}
optimizer: {kind: adam, learning_rate: 0.001}
global_batch_size: 32
steps: 1
)")));
  TrainState state = TrainState::Create(bn.model.Init(TrainingPlan::InitKey(3, bn.impl), bn.impl),
                                        bn.optimizer, bn.model.InitStats());
  state.step = 5;
  for (size_t i = 0; i < state.batch_stats.size(); ++i) state.batch_stats[i] = 0.5f + i;
  const std::string path = dir_ + "/bn.safetensors";
  ASSERT_OK(WriteCheckpoint(path, bn.model, bn.optimizer, state, {}));
  ASSERT_OK_AND_ASSIGN(SafeTensors st, SafeTensors::Read(path));
  ASSERT_OK_AND_ASSIGN(std::vector<float> var1, st.F32("batch_stats.BatchNorm_1.var"));
  EXPECT_EQ(var1, std::vector<float>(state.batch_stats.end() - 10, state.batch_stats.end()));
  EXPECT_EQ(st.tensors().count("params.BatchNorm_1.scale"), 0u);
  ASSERT_OK_AND_ASSIGN(StartingPoint start, ReadStartingPoint(path, bn.model, bn.optimizer));
  EXPECT_FALSE(start.params_only);
  EXPECT_EQ(start.state.batch_stats, state.batch_stats);
  // Params alone (Flax's `params` collection): the running averages start as init's.
  SafeTensors params_only;
  for (const ParamEntry& e : bn.model.layout().entries()) {
    std::string name = "params." + e.name;
    for (char& c : name) c = c == '/' ? '.' : c;
    params_only.AddF32(name, e.shape,
                       std::span<const float>(state.params.data() + e.offset, e.size));
  }
  ASSERT_OK(params_only.Write(dir_ + "/bn-params.safetensors"));
  ASSERT_OK_AND_ASSIGN(start,
                       ReadStartingPoint(dir_ + "/bn-params.safetensors", bn.model, bn.optimizer));
  EXPECT_TRUE(start.params_only);
  EXPECT_EQ(start.state.batch_stats, bn.model.InitStats());
}

// The issue's finding: a flipped byte in an optimizer slot was trained from. Now a byte
// flipped in any kind of tensor (params, both adam slots, the count, batch_stats) or in
// the metadata is DATA_LOSS naming the file and what was damaged, on every read.
TEST_F(CheckpointTest, AByteFlippedInAnyTensorOrTheMetadataIsDataLossNamingIt) {
  ASSERT_OK_AND_ASSIGN(TrainSetup bn, SetupFromSpec(ValidSpec(R"(
model: {layers: [flatten, dense: {features: 8}, batch_norm: {momentum: 0.9}, relu,
                 dense: {features: 10}]}
optimizer: {kind: adam, learning_rate: 0.001}
global_batch_size: 32
steps: 1
)")));
  TrainState state = TrainState::Create(bn.model.Init(TrainingPlan::InitKey(3, bn.impl), bn.impl),
                                        bn.optimizer, bn.model.InitStats());
  state.step = 9;
  const std::string path = dir_ + "/whole.safetensors";
  ASSERT_OK(WriteCheckpoint(path, bn.model, bn.optimizer, state,
                            {{"main_key", "0123456789abcdef"}, {"spec", "{}"}}));
  const std::string whole = ReadAll(path);
  auto byte_of = [&](const std::string& tensor) { return TensorOffset(whole, tensor) + 1; };
  ForEachDamage(path, whole,
                {
                    {"params.Dense_0.kernel", byte_of("params.Dense_0.kernel")},
                    {"opt_state.mu.Dense_0.kernel", byte_of("opt_state.mu.Dense_0.kernel")},
                    {"opt_state.nu.BatchNorm_0.scale", byte_of("opt_state.nu.BatchNorm_0.scale")},
                    {"opt_state.count", byte_of("opt_state.count")},
                    {"batch_stats.BatchNorm_0.var", byte_of("batch_stats.BatchNorm_0.var")},
                    {"header", whole.find("0123456789abcdef") + 3},  // the RNG key
                    {"header", whole.find("\"step\":\"9\"") + 8},    // the step
                },
                0x04, [&](const Damage& d) {
                  EXPECT_THAT(ReadCheckpoint(path, bn.model, bn.optimizer),
                              StatusIs(absl::StatusCode::kDataLoss,
                                       AllOf(HasSubstr(path), HasSubstr(d.what))));
                  EXPECT_THAT(ReadStartingPoint(path, bn.model, bn.optimizer),
                              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(d.what)));
                });
  bool digested = false;
  ASSERT_OK_AND_ASSIGN(TrainState back,
                       ReadCheckpoint(path, bn.model, bn.optimizer, nullptr, &digested));
  EXPECT_TRUE(digested);
  EXPECT_EQ(back.step, 9);
}

// A train state written before checkpoints kept digests and the count reads as it did,
// undigested (the caller warns); one whose count is not its step is refused.
TEST_F(CheckpointTest, AnOlderTrainStateWithoutDigestsReadsUndigested) {
  const std::string path = dir_ + "/old.safetensors";
  SafeTensors st;
  for (const ParamEntry& e : setup_->model.layout().entries()) {
    std::string name = e.name;
    for (char& c : name) c = c == '/' ? '.' : c;
    st.AddF32("params." + name, e.shape,
              std::span<const float>(state_.params.data() + e.offset, e.size));
    for (size_t s = 0; s < setup_->optimizer.slots().size(); ++s) {
      st.AddF32("opt_state." + setup_->optimizer.slots()[s] + "." + name, e.shape,
                std::span<const float>(state_.slots[s].data() + e.offset, e.size));
    }
  }
  st.metadata() = {{"step", "17"}, {"format", "lockstep.train_state.v1"}};
  ASSERT_OK(st.Write(path));
  // Strip the digests Write added, as an older writer had none.
  std::string bytes = ReadAll(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  header["__metadata__"].erase("lockstep.tensor_digests");
  header["__metadata__"].erase("lockstep.header_digest");
  std::string h = header.dump();
  while (h.size() < n) h.push_back(' ');
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      << bytes.substr(0, 8) << h << bytes.substr(8 + n);
  ASSERT_OK_AND_ASSIGN(StartingPoint start,
                       ReadStartingPoint(path, setup_->model, setup_->optimizer));
  EXPECT_FALSE(start.digested);
  EXPECT_FALSE(start.params_only);
  EXPECT_EQ(start.state.step, 17);
  EXPECT_TRUE(start.state.slots == state_.slots);

  const int64_t wrong = 16;
  st.Add("opt_state.count", "I64", {}, &wrong, sizeof(wrong));
  ASSERT_OK(st.Write(path));
  EXPECT_THAT(
      ReadCheckpoint(path, setup_->model, setup_->optimizer),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("opt_state.count is not the step 17")));
}

}  // namespace
}  // namespace lockstep::testing
