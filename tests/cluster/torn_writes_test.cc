// A coordinator SIGKILLed six times at random moments while it writes an 8 MB snapshot
// every 5 steps and its job records at every state change: each restarted coordinator loads
// its records and resumes the job from its newest whole snapshot, and the job ends with the
// parameters of an undisturbed run, bit for bit. What the kills leave behind is temporary
// files only, and the restarted coordinator removes them.
#include <filesystem>
#include <iostream>
#include <random>

#include "absl/strings/str_join.h"
#include "core/io/durable_file.h"
#include "core/testing.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;

// The temporary files of durable writes under `dir` that hold bytes (a kill can leave an
// empty one, which no reader mistakes for anything).
std::vector<std::string> TemporaryFilesWithBytes(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code size_ec;
    if (IsTemporaryFileName(it->path().filename().string()) && it->is_regular_file(size_ec) &&
        fs::file_size(it->path(), size_ec) > 0) {
      found.push_back(it->path().string());
    }
  }
  return found;
}

TEST(TornWrites, ACoordinatorKilledAmidItsWritesResumesBitForBit) {
  auto cluster = LocalCluster::Start(2);
  ASSERT_OK(cluster);
  LocalCluster& c = **cluster;
  v1::JobSpec spec = MlpSpec(2, 400);
  // 8 MB snapshots (params and adam's two slots): their writes fill much of the time.
  spec.mutable_model()->clear_hidden();
  spec.mutable_model()->add_hidden(512);
  spec.mutable_model()->add_hidden(512);
  spec.mutable_recovery()->set_snapshot_every_steps(5);  // a snapshot is nearly always due
  spec.mutable_recovery()->set_max_restarts(20);

  spec.set_request_id("undisturbed");
  ASSERT_OK_AND_ASSIGN(v1::Job clean, c.Submit(spec));
  ASSERT_OK_AND_ASSIGN(v1::Job clean_done, c.WaitFor(clean.id(), absl::Minutes(3)));
  ASSERT_EQ(clean_done.state(), v1::SUCCEEDED) << clean_done.failure_reason();

  spec.set_request_id("killed");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c.Submit(spec));
  std::mt19937 rng(20240611);  // seeded: a failure can be replayed
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::string> kills;
  int64_t step = 0;
  int kills_mid_write = 0;
  for (int k = 0; k < 6; ++k) {
    step += uniform(25, 55);
    const absl::Status reached = c.WaitForStep(job.id(), step, absl::Minutes(2)).status();
    ASSERT_TRUE(reached.ok()) << reached << "\n" << c.Logs();
    // Past the step, at a random moment of the 5-step cycle of steps and snapshot writes.
    const int ms = uniform(0, 40);
    absl::SleepFor(absl::Milliseconds(ms));
    kills.push_back(absl::StrCat("step ", step, " + ", ms, " ms"));
    ASSERT_OK(c.RestartCoordinator());
    // A write the kill cut short, unless the restarted coordinator has already cleared it
    // (a lower bound, for the log).
    if (!TemporaryFilesWithBytes(c.dir()).empty()) ++kills_mid_write;
  }
  std::cout << kills.size() << " kills, at least " << kills_mid_write
            << " of them amid a write (a temporary file found after the restart)\n";

  ASSERT_OK_AND_ASSIGN(v1::Job done, c.WaitFor(job.id(), absl::Minutes(3)));
  const std::string when = absl::StrJoin(kills, ", ");
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << "\nkills at " << when << "\n"
                                         << c.Logs();
  EXPECT_EQ(done.param_checksum(), clean_done.param_checksum()) << "kills at " << when;
  EXPECT_GE(done.recoveries(), 6) << "kills at " << when;
  // The job's last record may still be on its way to the disk: its temporary file goes
  // within moments, while one a kill left would stay.
  std::vector<std::string> left = TemporaryFilesWithBytes(c.dir());
  for (int i = 0; i < 50 && !left.empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    left = TemporaryFilesWithBytes(c.dir());
  }
  EXPECT_EQ(left, std::vector<std::string>()) << "kills at " << when;
}

}  // namespace
}  // namespace lockstep::testing
