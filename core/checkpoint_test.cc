// Checkpoints and starting points: a train state round-trips bitwise with its metadata
// (BatchNorm's batch_stats under Flax's names too), a params-only file (either naming)
// starts at step 0 with a fresh optimizer state, and a file for another model is refused
// naming the tensor.
#include "core/checkpoint.h"

#include <filesystem>

#include "core/io/safetensors.h"
#include "core/plan.h"
#include "core/spec/spec.h"
#include "core/spec/testing.h"
#include "core/testing.h"

namespace lockstep::testing {
namespace {

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

}  // namespace
}  // namespace lockstep::testing
