// Tests of JobRecords: the job records on disk, in a temporary folder per test.
#include "services/coordinator/storage/job_records.h"

#include <google/protobuf/util/message_differencer.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/io/kill_testing.h"
#include "core/testing.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

v1::Job MakeJob(const std::string& id, v1::JobState state) {
  v1::Job job;
  job.set_id(id);
  job.set_state(state);
  job.mutable_spec()->set_workers(2);
  job.mutable_spec()->set_request_id("req-" + id);
  job.set_created_unix_ms(1700000000123);
  return job;
}

std::vector<std::string> Ids(const std::vector<v1::Job>& jobs) {
  std::vector<std::string> ids;
  for (const v1::Job& j : jobs) ids.push_back(j.id());
  return ids;
}

class JobRecordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "job_records_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    root_ = templ;
    dir_ = root_ + "/jobs";  // not there yet: Save creates it
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // The names of the files in the records folder.
  std::vector<std::string> Files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    return names;
  }
  void WriteFile(const std::string& name, const std::string& text) const {
    fs::create_directories(dir_);
    std::ofstream(dir_ + "/" + name) << text;
  }

  std::string root_, dir_;
};

TEST_F(JobRecordsTest, ASavedJobLoadsBackTheSame) {
  JobRecords records(dir_);
  v1::Job job = MakeJob("job-000001", v1::FAILED);
  job.set_failure_reason("worker w0001 (fake:1, rank 1): connection reset");
  job.set_failure_code("UNAVAILABLE");
  job.add_workers("w0000");
  job.add_workers("w0001");
  job.set_param_checksum(0xfedcba9876543210ull);
  job.mutable_last_eval()->set_test_accuracy(0.75);
  ASSERT_OK(records.Save(job, 1));
  EXPECT_THAT(Files(), ElementsAre("job-000001.json"));  // no temporary file left behind

  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> loaded, JobRecords(dir_).Load());
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(loaded[0], job))
      << loaded[0].DebugString();
}

TEST_F(JobRecordsTest, LoadOfAFolderNotCreatedYetIsEmpty) {
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> loaded, JobRecords(dir_).Load());
  EXPECT_THAT(loaded, IsEmpty());
}

TEST_F(JobRecordsTest, LoadReturnsTheJobsSortedById) {
  JobRecords records(dir_);
  for (const char* id : {"job-000003", "job-000010", "job-000001", "job-000002"}) {
    ASSERT_OK(records.Save(MakeJob(id, v1::SUCCEEDED), 1));
  }
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> loaded, records.Load());
  EXPECT_THAT(Ids(loaded), ElementsAre("job-000001", "job-000002", "job-000003", "job-000010"));
}

TEST_F(JobRecordsTest, AWriteOlderThanOneMadeIsSkipped) {
  JobRecords records(dir_);
  ASSERT_OK(records.Save(MakeJob("job-000001", v1::RUNNING), 2));
  ASSERT_OK(records.Save(MakeJob("job-000001", v1::QUEUED), 1));  // stale: skipped
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> loaded, records.Load());
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].state(), v1::RUNNING);

  ASSERT_OK(records.Save(MakeJob("job-000001", v1::SUCCEEDED), 3));
  ASSERT_OK_AND_ASSIGN(loaded, records.Load());
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].state(), v1::SUCCEEDED);
}

TEST_F(JobRecordsTest, EraseRemovesTheRecord) {
  JobRecords records(dir_);
  ASSERT_OK(records.Save(MakeJob("job-000001", v1::SUCCEEDED), 1));
  ASSERT_OK(records.Save(MakeJob("job-000002", v1::CANCELLED), 1));
  ASSERT_OK(records.Erase("job-000001"));
  EXPECT_THAT(Files(), ElementsAre("job-000002.json"));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> loaded, records.Load());
  EXPECT_THAT(Ids(loaded), ElementsAre("job-000002"));
}

// The bitwise witness is kept beside the record (witness.h): a store opened again (a
// restarted coordinator) reads back every mark, checksums whole (all 64 bits); a flipped
// byte is DATA_LOSS naming the file, found by its digests; Erase removes it.
TEST_F(JobRecordsTest, TheWitnessIsReadBackAfterReopeningAndCheckedByItsDigests) {
  std::vector<v1::SnapshotMark> marks;
  AddWitnessMark(marks, 25, 0xfedcba9876543210ull, 1700000000100);
  AddWitnessMark(marks, 50, 0x0123456789abcdefull, 1700000000200);
  {
    JobRecords records(dir_);
    ASSERT_OK(records.Save(MakeJob("job-000001", v1::RUNNING), 1, nullptr, &marks));
    ASSERT_OK(records.Save(MakeJob("job-000002", v1::RUNNING), 1));  // no snapshot yet
  }
  JobRecords reopened(dir_);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::SnapshotMark> got, reopened.LoadWitness("job-000001"));
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got[i], marks[i]))
        << got[i].DebugString();
  }
  ASSERT_OK_AND_ASSIGN(got, reopened.LoadWitness("job-000002"));
  EXPECT_THAT(got, IsEmpty());

  const std::string file = dir_ + "/job-000001.witness.safetensors";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-3, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-3, std::ios::end);
    f.put(static_cast<char>(c ^ 0x01));
  }
  EXPECT_THAT(reopened.LoadWitness("job-000001"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(file)));
  ASSERT_OK(reopened.Erase("job-000001"));
  EXPECT_THAT(Files(), ElementsAre("job-000002.json"));
}

TEST_F(JobRecordsTest, ATemporaryFileLeftByAKillIsIgnoredAndRemoved) {
  JobRecords records(dir_);
  ASSERT_OK(records.Save(MakeJob("job-000001", v1::SUCCEEDED), 1));
  WriteFile("job-000002.json.tmp", "{\"id\": \"job-0000");         // torn, as writes named them
  WriteFile("job-000003.json.x1Y2z3.tmp", "{\"id\": \"job-0000");  // torn, as they do now
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> loaded, records.Load());
  EXPECT_THAT(Ids(loaded), ElementsAre("job-000001"));
  EXPECT_THAT(Files(), ElementsAre("job-000001.json"));
}

// A coordinator killed with SIGKILL while it rewrites a record, at random moments: each time,
// the records load, and the record is one of the two versions it was writing, whole. The
// record carries a long failure reason (256 KiB) so that kills land inside its writes.
TEST_F(JobRecordsTest, AKillDuringRewritesLeavesAWholeRecord) {
  v1::Job versions[2] = {MakeJob("job-000001", v1::RUNNING), MakeJob("job-000001", v1::FAILED)};
  versions[0].set_step(41);
  versions[1].set_failure_reason(std::string(256 << 10, 'r'));
  versions[1].set_failure_code("UNAVAILABLE");
  JobRecords records(dir_);  // each child writes through its own copy
  auto write = [&](int trial, int64_t n) {
    return records.Save(versions[(trial + n) % 2], n + 1).ok() &&
           records.SaveNextId(1000 * trial + n + 2).ok();
  };
  int seen[2] = {0, 0};
  auto check = [&](int trial) {
    ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> loaded, JobRecords(dir_).Load());
    ASSERT_EQ(loaded.size(), 1u) << "trial " << trial;
    const bool second = google::protobuf::util::MessageDifferencer::Equals(loaded[0], versions[1]);
    ASSERT_TRUE(second ||
                google::protobuf::util::MessageDifferencer::Equals(loaded[0], versions[0]))
        << "trial " << trial << ": " << loaded[0].ShortDebugString().substr(0, 200);
    ++seen[second];
    ASSERT_OK_AND_ASSIGN(int64_t next, JobRecords(dir_).LoadNextId());
    EXPECT_GE(next, 2) << "trial " << trial;
    for (const std::string& name : Files()) {
      // Load removed what the kill left, but for a temporary file it left empty.
      if (name != "job-000001.json" && name != "next_id") {
        EXPECT_EQ(fs::file_size(dir_ + "/" + name), 0u) << "trial " << trial << ": " << name;
      }
    }
  };
  const KillTrials trials{.trials = 40, .seed = 7001, .min_delay_ms = 2, .max_delay_ms = 40};
  int64_t writes = 0;
  KillDuringWrites(trials, write, check, &writes);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(writes, trials.trials);
  std::cout << trials.trials << " kills, " << writes << " complete record writes; versions "
            << seen[0] << "/" << seen[1] << "\n";
}

TEST_F(JobRecordsTest, AnUnparsableRecordIsDataLossNamingTheFile) {
  JobRecords records(dir_);
  ASSERT_OK(records.Save(MakeJob("job-000001", v1::SUCCEEDED), 1));
  WriteFile("job-000002.json", "this is not json");
  EXPECT_THAT(records.Load(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(dir_ + "/job-000002.json")));
}

TEST_F(JobRecordsTest, FieldsUnknownToThisVersionAreIgnored) {
  WriteFile("job-000001.json", R"({"id": "job-000001", "state": "SUCCEEDED", "from_v2": 7})");
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> loaded, JobRecords(dir_).Load());
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].state(), v1::SUCCEEDED);
}

TEST_F(JobRecordsTest, AFolderThatCannotBeCreatedIsDataLossNamingIt) {
  std::ofstream(root_ + "/file") << "a file, not a folder";
  const std::string dir = root_ + "/file/jobs";
  JobRecords records(dir);
  EXPECT_THAT(records.Save(MakeJob("job-000001", v1::QUEUED), 1),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(dir)));
}

TEST_F(JobRecordsTest, ConcurrentWritesOfDifferentJobsAllLand) {
  JobRecords records(dir_);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&records, t] {
      for (int v = 1; v <= 5; ++v) {
        const v1::JobState state = v == 5 ? v1::SUCCEEDED : v1::RUNNING;
        ASSERT_OK(records.Save(MakeJob(absl::StrCat("job-00000", t), state), v));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> loaded, records.Load());
  ASSERT_EQ(loaded.size(), 4u);
  for (const v1::Job& job : loaded) EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.id();
  EXPECT_THAT(Files(), UnorderedElementsAre("job-000000.json", "job-000001.json", "job-000002.json",
                                            "job-000003.json"));
}

TEST_F(JobRecordsTest, AnEmptyFolderKeepsNothing) {
  JobRecords records("");
  ASSERT_OK(records.Save(MakeJob("job-records-test-empty", v1::QUEUED), 1));
  EXPECT_FALSE(fs::exists("/job-records-test-empty.json"));
  EXPECT_FALSE(fs::exists("job-records-test-empty.json"));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> loaded, records.Load());
  EXPECT_THAT(loaded, IsEmpty());
  ASSERT_OK(records.Erase("job-records-test-empty"));
}

TEST_F(JobRecordsTest, TheNextIdIsKeptBesideTheRecordsAndIsNotOne) {
  JobRecords records(dir_);
  ASSERT_OK_AND_ASSIGN(int64_t next, records.LoadNextId());
  EXPECT_EQ(next, 1);  // nothing saved yet
  ASSERT_OK(records.Save(MakeJob("job-000001", v1::QUEUED), 1));
  ASSERT_OK(records.SaveNextId(42));
  ASSERT_OK_AND_ASSIGN(next, JobRecords(dir_).LoadNextId());
  EXPECT_EQ(next, 42);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> loaded, records.Load());
  EXPECT_EQ(loaded.size(), 1u);
  std::ofstream(dir_ + "/next_id") << "garbage";
  EXPECT_THAT(records.LoadNextId(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("next_id")));
}

}  // namespace
}  // namespace lockstep::testing
