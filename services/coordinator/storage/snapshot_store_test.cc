// Tests of SnapshotStore: a job's snapshots on disk, in a temporary folder per test, with
// the small MLP's params and adam slots.
#include "services/coordinator/storage/snapshot_store.h"

#include <google/protobuf/util/json_util.h>
#include <stdlib.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/io/safetensors_testing.h"
#include "core/spec/testing.h"
#include "services/common/observability/job_log.h"
#include "services/common/observability/job_log_testing.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Whether two float vectors hold the same bits (NaN payloads and -0 included).
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class SnapshotStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "snapshot_store_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    root_ = templ;
    dir_ = root_ + "/job-000001";  // not there yet: Write creates it
    spec_ = SmallMlpSpec(2, 100);
    ASSERT_OK_AND_ASSIGN(TrainSetup setup, SetupFromSpec(spec_));
    setup_ = std::make_unique<TrainSetup>(std::move(setup));
    ASSERT_EQ(setup_->optimizer.slots().size(), 2u);  // adam: mu, nu
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  // A state whose every value depends on `step`, with the values a text format would lose:
  // -0, a NaN with a payload, infinities, a denormal.
  TrainState State(int64_t step) const {
    TrainState s;
    s.step = step;
    const size_t n = setup_->model.layout().total();
    auto fill = [&](uint32_t salt) {
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) {
        v[i] = std::sin(static_cast<float>(i * 7 + step * 13 + salt)) * 0.1f;
      }
      v[0] = -0.0f;
      v[1] = std::bit_cast<float>(0x7fc12345u + static_cast<uint32_t>(step));
      v[2] = std::numeric_limits<float>::infinity();
      v[3] = -std::numeric_limits<float>::infinity();
      v[4] = std::numeric_limits<float>::denorm_min();
      return v;
    };
    s.params = fill(0);
    s.slots = {fill(1), fill(2)};
    return s;
  }
  // What the job runner writes beside a state.
  std::map<std::string, std::string> Metadata(const TrainState& s) const {
    std::string spec_json;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(spec_, &spec_json).ok());
    return {{"job_id", "job-000001"},
            {"spec", spec_json},
            {"data_key", absl::StrCat("data-", s.step)},
            {"main_key", absl::StrCat("main-", s.step)},
            {"param_checksum", absl::StrFormat("%016x", ParamChecksum(s.params))}};
  }
  absl::Status Write(SnapshotStore& store, int64_t step) const {
    const TrainState s = State(step);
    return store.Write(setup_->model, setup_->optimizer, s, Metadata(s));
  }
  absl::StatusOr<std::optional<Snapshot>> Latest(const SnapshotStore& store) const {
    return store.Latest(setup_->model, setup_->optimizer);
  }
  // Expects `got` to be the snapshot of `step`, bit for bit.
  void ExpectSnapshotOf(const std::optional<Snapshot>& got, int64_t step) const {
    ASSERT_TRUE(got.has_value());
    const TrainState want = State(step);
    EXPECT_EQ(got->state.step, step);
    EXPECT_TRUE(SameBits(got->state.params, want.params));
    ASSERT_EQ(got->state.slots.size(), 2u);
    EXPECT_TRUE(SameBits(got->state.slots[0], want.slots[0]));
    EXPECT_TRUE(SameBits(got->state.slots[1], want.slots[1]));
    for (const auto& [k, v] : Metadata(want)) EXPECT_EQ(got->metadata.at(k), v) << k;
    EXPECT_EQ(got->metadata.at("step"), absl::StrCat(step));
  }
  // The file of the snapshot of `step`, as the store names it.
  std::string Path(int64_t step) const {
    return absl::StrFormat("%s/step-%012d.safetensors", dir_, step);
  }
  std::vector<std::string> Files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  // Where the bytes of the first params tensor of the safetensors file `bytes` start.
  static size_t ParamsOffset(const std::string& bytes) {
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);  // little-endian, as the hosts we run on
    const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
    for (const auto& [name, v] : header.items()) {
      if (name.rfind("params.", 0) == 0) return 8 + n + v["data_offsets"][0].get<size_t>();
    }
    ADD_FAILURE() << "no params tensor";
    return 0;
  }

  std::string root_, dir_;
  v1::JobSpec spec_;
  std::unique_ptr<TrainSetup> setup_;
};

TEST_F(SnapshotStoreTest, LatestIsTheNewestSnapshotWithItsMetadataBitForBit) {
  SnapshotStore store(dir_, 5);
  EXPECT_TRUE(store.enabled());
  for (int64_t step : {5, 10, 15}) ASSERT_OK(Write(store, step));
  EXPECT_THAT(store.Steps(), ElementsAre(5, 10, 15));
  ASSERT_OK_AND_ASSIGN(std::optional<Snapshot> latest, Latest(store));
  ExpectSnapshotOf(latest, 15);
  // Another store over the folder (a restarted coordinator) reads the same.
  ASSERT_OK_AND_ASSIGN(latest, Latest(SnapshotStore(dir_, 5)));
  ExpectSnapshotOf(latest, 15);
  EXPECT_EQ(latest->metadata.at("format"), "lockstep.train_state.v1");
}

TEST_F(SnapshotStoreTest, StepsOrderNumericallyPastTheFirstDigits) {
  SnapshotStore store(dir_, 5);
  for (int64_t step : {999, 1000, 12}) ASSERT_OK(Write(store, step));
  EXPECT_THAT(store.Steps(), ElementsAre(12, 999, 1000));
  EXPECT_TRUE(fs::exists(dir_ + "/step-000000001000.safetensors"));
  ASSERT_OK_AND_ASSIGN(std::optional<Snapshot> latest, Latest(store));
  ExpectSnapshotOf(latest, 1000);
}

TEST_F(SnapshotStoreTest, OnlyTheNewestKAreKept) {
  SnapshotStore store(dir_, 2);
  for (int64_t step : {5, 10, 15, 20}) ASSERT_OK(Write(store, step));
  EXPECT_THAT(store.Steps(), ElementsAre(15, 20));
  EXPECT_THAT(Files(),
              ElementsAre("step-000000000015.safetensors", "step-000000000020.safetensors"));
  SnapshotStore one(dir_, 0);  // keeps at least one
  ASSERT_OK(Write(one, 25));
  EXPECT_THAT(one.Steps(), ElementsAre(25));
}

TEST_F(SnapshotStoreTest, ClearRemovesEverySnapshot) {
  SnapshotStore store(dir_, 3);
  for (int64_t step : {5, 10}) ASSERT_OK(Write(store, step));
  store.Clear();
  EXPECT_THAT(store.Steps(), IsEmpty());
  EXPECT_FALSE(fs::exists(dir_));
  ASSERT_OK_AND_ASSIGN(std::optional<Snapshot> latest, Latest(store));
  EXPECT_FALSE(latest.has_value());
  store.Clear();  // twice is fine
}

TEST_F(SnapshotStoreTest, NoSnapshotIsNoneAndAStoreWithoutAFolderKeepsNothing) {
  ASSERT_OK_AND_ASSIGN(std::optional<Snapshot> latest, Latest(SnapshotStore(dir_, 2)));
  EXPECT_FALSE(latest.has_value());
  SnapshotStore none("", 2);
  EXPECT_FALSE(none.enabled());
  ASSERT_OK(Write(none, 5));
  EXPECT_THAT(none.Steps(), IsEmpty());
  ASSERT_OK_AND_ASSIGN(latest, Latest(none));
  EXPECT_FALSE(latest.has_value());
}

TEST_F(SnapshotStoreTest, AFolderThatCannotBeCreatedIsPermissionDeniedNamingIt) {
  std::ofstream(root_ + "/file") << "a file, not a folder";
  SnapshotStore store(root_ + "/file/job-000001", 2);
  EXPECT_THAT(Write(store, 5),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr(root_ + "/file")));
}

// What a disk fault or a hand can leave as the newest snapshot; each is skipped for the
// previous one, which a recovery replays from to the same params.
TEST_F(SnapshotStoreTest, ADamagedNewestSnapshotIsSkippedForThePreviousOne) {
  SnapshotStore store(dir_, 3);
  for (int64_t step : {5, 10}) ASSERT_OK(Write(store, step));
  const std::string newest = Path(10);
  const std::string whole = ReadAll(newest);
  const std::string older = ReadAll(Path(5));
  std::string flipped = whole;
  flipped[ParamsOffset(whole) + 4 * 7 + 1] ^= 0x10;  // a bit of a param: its digest tells
  std::string bad_header = whole;
  bad_header.replace(8, 6, "@@@@@@");
  const std::map<std::string, std::string> damages = {
      {"empty", ""},
      {"torn length", whole.substr(0, 5)},
      {"torn header", whole.substr(0, 40)},
      {"torn data", whole.substr(0, whole.size() / 2)},
      {"one byte short", whole.substr(0, whole.size() - 1)},
      {"bad header", bad_header},
      {"flipped bit", flipped},
      {"another step's file", older},
  };
  for (const auto& [what, bytes] : damages) {
    SCOPED_TRACE(what);
    WriteAll(newest, bytes);
    ASSERT_OK_AND_ASSIGN(std::optional<Snapshot> latest, Latest(store));
    ExpectSnapshotOf(latest, 5);
    EXPECT_THAT(store.Steps(), ElementsAre(5, 10));  // left as found, for a look
  }
  // The next snapshot of that step replaces the damaged file.
  ASSERT_OK(Write(store, 10));
  ASSERT_OK_AND_ASSIGN(std::optional<Snapshot> latest, Latest(store));
  ExpectSnapshotOf(latest, 10);
}

// The issue's finding: 64 bytes flipped in opt_state.mu.Dense_0.kernel of the newest
// snapshot were trained from. Every kind of tensor, and the metadata, is now covered by
// the file's digests: the newest is skipped for the previous one, and the job's log names
// the file and the tensor.
TEST_F(SnapshotStoreTest, AFlipAnywhereIsSkippedForThePreviousSnapshotNamingFileAndTensor) {
  LogCapture log;
  SnapshotStore store(dir_, 3);
  for (int64_t step : {5, 10}) ASSERT_OK(Write(store, step));
  const std::string newest = Path(10);
  const std::string whole = ReadAll(newest);
  const std::vector<Damage> damages = {
      {"opt_state.mu.Dense_0.kernel", TensorOffset(whole, "opt_state.mu.Dense_0.kernel") + 400, 64},
      {"opt_state.nu.Dense_1.bias", TensorOffset(whole, "opt_state.nu.Dense_1.bias") + 2},
      {"opt_state.count", TensorOffset(whole, "opt_state.count")},
      {"params.Dense_1.kernel", TensorOffset(whole, "params.Dense_1.kernel") + 9},
      {"header", whole.find("main-10") + 5},  // the RNG key in the metadata
      {"header", whole.find("job-000001") + 4},
  };
  ForEachDamage(newest, whole, damages, 0x5a, [&](const Damage& d) {
    log.Clear();
    ASSERT_OK_AND_ASSIGN(std::optional<Snapshot> latest, Latest(store));
    ExpectSnapshotOf(latest, 5);
    const std::vector<v1::LogLine> lines = log.lines();
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0].job(), "job-000001");
    EXPECT_EQ(lines[0].level(), "warning");
    EXPECT_THAT(lines[0].message(), AllOf(HasSubstr("resuming from step 5"), HasSubstr(newest),
                                          HasSubstr(d.what), HasSubstr("damaged")));
  });
}

TEST_F(SnapshotStoreTest, NoReadableSnapshotIsDataLossNamingEachFile) {
  SnapshotStore store(dir_, 3);
  for (int64_t step : {5, 10}) ASSERT_OK(Write(store, step));
  WriteAll(Path(5), "garbage");
  WriteAll(Path(10), ReadAll(Path(10)).substr(0, 1000));
  EXPECT_THAT(Latest(store),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(Path(5)), HasSubstr(Path(10)), HasSubstr("truncated"))));
}

TEST_F(SnapshotStoreTest, TemporaryFilesAreIgnoredAndTheNextWriteRemovesThem) {
  SnapshotStore store(dir_, 3);
  for (int64_t step : {5, 10}) ASSERT_OK(Write(store, step));
  const std::string whole = ReadAll(Path(10));
  // What kills mid-write leave: a torn temporary file of a newer step, and an old-style one.
  WriteAll(dir_ + "/step-000000000015.safetensors.aB3xYz.tmp", whole.substr(0, 3000));
  WriteAll(dir_ + "/step-000000000020.safetensors.tmp", whole);
  WriteAll(dir_ + "/notes.txt", "not a snapshot");
  EXPECT_THAT(store.Steps(), ElementsAre(5, 10));
  ASSERT_OK_AND_ASSIGN(std::optional<Snapshot> latest, Latest(store));
  ExpectSnapshotOf(latest, 10);
  ASSERT_OK(Write(store, 15));
  EXPECT_THAT(Files(),
              ElementsAre("notes.txt", "step-000000000005.safetensors",
                          "step-000000000010.safetensors", "step-000000000015.safetensors"));
  ASSERT_OK_AND_ASSIGN(latest, Latest(store));
  ExpectSnapshotOf(latest, 15);
}

}  // namespace
}  // namespace lockstep::testing
