// DashboardApi over a JobManager of fake workers (job_manager_test.h): the tokens and
// roles, the filters, the routes' answers and their status codes, without a network.
#include "services/dashboard/api.h"

#include <nlohmann/json.hpp>

#include "services/coordinator/scheduling/job_manager_test.h"

namespace lockstep::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr char kAlice[] = "alice-token-0123456789";
constexpr char kBob[] = "bob-token-0123456789ab";
constexpr char kRoot[] = "root-token-0123456789a";

class DashboardApiTest : public JobManagerTest {
 protected:
  DashboardApiTest()
      : guard_(Guard::Tls(TokenTable::Parse(absl::StrCat(kAlice, " alice user\n", kBob,
                                                         " bob user\n", kRoot, " root admin\n"),
                                            "tokens")
                              .value())) {}

  HttpReply Call(const std::string& token, const std::string& path,
                 std::map<std::string, std::string> query = {}, const std::string& method = "GET") {
    DashboardApi api(jobs_.get(), pool_.get(), &guard_);
    return api.Handle({method, path, std::move(query), token.empty() ? "" : "Bearer " + token});
  }
  // The JSON of a 200 answer (a test failure otherwise).
  nlohmann::json Ok(const HttpReply& r) {
    EXPECT_EQ(r.code, 200) << r.body;
    return nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  }
  // Its field `key`, by value (a range-for over a temporary's member would dangle).
  nlohmann::json Ok(const HttpReply& r, const char* key) { return Ok(r)[key]; }
  std::vector<std::string> JobIds(const HttpReply& r) {
    std::vector<std::string> ids;
    for (const auto& j : Ok(r, "jobs")) ids.push_back(j["id"]);
    return ids;
  }
  std::string Submit(const std::string& owner, const std::string& name = "") {
    v1::JobSpec spec = Spec(2);
    spec.set_name(name);
    absl::StatusOr<v1::Job> job = jobs_->Submit(spec, {owner, false});
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }

  Guard guard_;
};

TEST_F(DashboardApiTest, WhoAmINamesTheTokensCaller) {
  ASSERT_OK(Start());
  nlohmann::json alice = Ok(Call(kAlice, "/api/v1/whoami"));
  EXPECT_EQ(alice["name"], "alice");
  EXPECT_EQ(alice["admin"], false);
  EXPECT_EQ(Ok(Call(kRoot, "/api/v1/whoami"))["admin"], true);
}

TEST_F(DashboardApiTest, WithoutAKnownTokenIsUnauthenticated) {
  ASSERT_OK(Start());
  for (const std::string& token : {std::string(), std::string("not-a-token-0123456789")}) {
    const HttpReply r = Call(token, "/api/v1/jobs");
    EXPECT_EQ(r.code, 401) << token;
    EXPECT_THAT(r.body, HasSubstr("\"code\":\"UNAUTHENTICATED\""));
    EXPECT_THAT(r.headers, ::testing::Contains(::testing::Pair("WWW-Authenticate", "Bearer")));
  }
}

TEST_F(DashboardApiTest, UsersListTheirOwnJobsAndAdminsEveryonesByOwner) {
  ASSERT_OK(Start());  // no workers: the jobs stay queued
  const std::string a1 = Submit("alice"), b1 = Submit("bob"), a2 = Submit("alice");
  EXPECT_THAT(JobIds(Call(kAlice, "/api/v1/jobs")), ElementsAre(a2, a1));  // newest first
  EXPECT_THAT(JobIds(Call(kBob, "/api/v1/jobs")), ElementsAre(b1));
  EXPECT_THAT(JobIds(Call(kRoot, "/api/v1/jobs")), ElementsAre(a2, b1, a1));
  EXPECT_THAT(JobIds(Call(kRoot, "/api/v1/jobs", {{"owner", "bob"}})), ElementsAre(b1));
  EXPECT_THAT(JobIds(Call(kAlice, "/api/v1/jobs", {{"owner", "alice"}})), ElementsAre(a2, a1));
  const HttpReply r = Call(kAlice, "/api/v1/jobs", {{"owner", "bob"}});
  EXPECT_EQ(r.code, 403);
  EXPECT_THAT(r.body, HasSubstr("own jobs only"));
}

TEST_F(DashboardApiTest, FiltersByStateNameAndLimit) {
  ASSERT_OK(Start());
  const std::string mnist = Submit("alice", "MNIST-small"), other = Submit("alice", "cifar");
  ASSERT_OK(jobs_->Cancel(other).status());
  EXPECT_THAT(JobIds(Call(kAlice, "/api/v1/jobs", {{"state", "QUEUED"}})), ElementsAre(mnist));
  EXPECT_THAT(JobIds(Call(kAlice, "/api/v1/jobs", {{"state", "cancelled,queued"}})),
              ElementsAre(other, mnist));
  EXPECT_THAT(JobIds(Call(kAlice, "/api/v1/jobs", {{"name", "mnist"}})), ElementsAre(mnist));
  EXPECT_THAT(JobIds(Call(kAlice, "/api/v1/jobs", {{"name", other}})), ElementsAre(other));
  EXPECT_THAT(JobIds(Call(kAlice, "/api/v1/jobs", {{"limit", "1"}})), ElementsAre(other));
  HttpReply r = Call(kAlice, "/api/v1/jobs", {{"state", "DONE"}});
  EXPECT_EQ(r.code, 400);
  EXPECT_THAT(r.body, HasSubstr("query parameter state"));
  r = Call(kAlice, "/api/v1/jobs", {{"limit", "ten"}});
  EXPECT_EQ(r.code, 400);
  EXPECT_THAT(r.body, HasSubstr("query parameter limit"));
}

TEST_F(DashboardApiTest, AnotherUsersJobIsForbiddenOnEveryRoute) {
  ASSERT_OK(Start());
  const std::string bobs = Submit("bob");
  for (const std::string what : {"", "/history", "/events", "/logs", "/witness", "/workers"}) {
    const HttpReply r = Call(kAlice, "/api/v1/jobs/" + bobs + what);
    EXPECT_EQ(r.code, 403) << what;
    EXPECT_THAT(r.body, HasSubstr("belongs to another user")) << what;
  }
  EXPECT_EQ(Call(kAlice, "/api/v1/jobs/" + bobs + "/cancel", {}, "POST").code, 403);
  EXPECT_EQ(Ok(Call(kBob, "/api/v1/jobs/" + bobs))["state"], "QUEUED");  // not cancelled
  EXPECT_EQ(Ok(Call(kRoot, "/api/v1/jobs/" + bobs))["owner"], "bob");
}

TEST_F(DashboardApiTest, UnknownJobsRoutesAndMethods) {
  ASSERT_OK(Start());
  const std::string id = Submit("alice");
  HttpReply r = Call(kAlice, "/api/v1/jobs/job-999999");
  EXPECT_EQ(r.code, 404);
  EXPECT_THAT(r.body, HasSubstr("\"code\":\"NOT_FOUND\""));
  EXPECT_EQ(Call(kAlice, "/api/v1/jobs/" + id + "/nothing").code, 404);
  EXPECT_EQ(Call(kAlice, "/api/v1/nothing").code, 404);
  r = Call(kAlice, "/api/v1/jobs/" + id + "/cancel");  // GET
  EXPECT_EQ(r.code, 405);
  EXPECT_THAT(r.headers, ::testing::Contains(::testing::Pair("Allow", "POST")));
  EXPECT_EQ(Call(kAlice, "/api/v1/jobs", {}, "DELETE").code, 405);
}

TEST_F(DashboardApiTest, CancelIsTheOwnersAndOnlyOnce) {
  ASSERT_OK(Start());
  const std::string id = Submit("alice");
  EXPECT_EQ(Ok(Call(kAlice, "/api/v1/jobs/" + id + "/cancel", {}, "POST"))["state"], "CANCELLED");
  const HttpReply again = Call(kAlice, "/api/v1/jobs/" + id + "/cancel", {}, "POST");
  EXPECT_EQ(again.code, 400);  // FAILED_PRECONDITION
  EXPECT_THAT(again.body, HasSubstr("already ended"));
  std::vector<std::string> states;
  for (const auto& e : Ok(Call(kAlice, "/api/v1/jobs/" + id + "/events"), "events")) {
    states.push_back(e["state"]["state"]);
  }
  EXPECT_THAT(states, ElementsAre("QUEUED", "CANCELLED"));
}

TEST_F(DashboardApiTest, HistoryHasEveryStepAndEvaluationFromAStep) {
  Register(2);
  ASSERT_OK(Start());
  const std::string id = Submit("alice");
  ASSERT_EQ(AwaitEnd(id).state(), v1::SUCCEEDED);
  std::vector<int64_t> steps, evals;
  for (const auto& e : Ok(Call(kAlice, "/api/v1/jobs/" + id + "/history"), "events")) {
    ASSERT_FALSE(e.contains("state")) << e;
    if (e.contains("step")) steps.push_back(std::stoll(e["step"]["step"].get<std::string>()));
    if (e.contains("eval")) evals.push_back(std::stoll(e["eval"]["step"].get<std::string>()));
  }
  EXPECT_THAT(steps, ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_THAT(evals, ElementsAre(3, 6));
  steps.clear();
  for (const auto& e :
       Ok(Call(kAlice, "/api/v1/jobs/" + id + "/history", {{"from_step", "5"}}), "events")) {
    if (e.contains("step")) steps.push_back(std::stoll(e["step"]["step"].get<std::string>()));
  }
  EXPECT_THAT(steps, ElementsAre(5, 6));
  EXPECT_EQ(Call(kAlice, "/api/v1/jobs/" + id + "/history", {{"from_step", "-1"}}).code, 400);
}

// Fakes hold their state (each step adds 1 to a param), so their snapshots give the witness
// its marks; witness_test.cc has their rules, and the browser test a real cluster's.
TEST_F(DashboardApiTest, WitnessHasEachSnapshotAndTheFinalChecksumAcrossARestart) {
  ASSERT_OK(Start());
  v1::JobSpec spec = Spec(2);
  spec.mutable_recovery()->set_snapshot_every_steps(2);  // 6 steps: snapshots at 2 and 4
  ASSERT_OK_AND_ASSIGN(const v1::Job job, jobs_->Submit(spec, {"alice", false}));
  nlohmann::json w = Ok(Call(kAlice, "/api/v1/jobs/" + job.id() + "/witness"));
  EXPECT_TRUE(w["snapshots"].empty()) << w;
  EXPECT_EQ(w["final_checksum"], "0");  // queued: none yet
  Register(2);
  jobs_->Kick();
  const v1::Job done = AwaitEnd(job.id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  w = Ok(Call(kAlice, "/api/v1/jobs/" + job.id() + "/witness"));
  std::vector<std::string> steps, checksums;
  for (const auto& m : w["snapshots"]) {
    steps.push_back(m["step"]);
    checksums.push_back(m["param_checksum"]);
  }
  EXPECT_THAT(steps, ElementsAre("2", "4"));
  // The state moved between the marks and after them: three different checksums.
  ASSERT_EQ(checksums.size(), 2u);
  EXPECT_NE(checksums[0], checksums[1]);
  EXPECT_NE(checksums[1], std::to_string(done.param_checksum()));
  EXPECT_NE(checksums[0], "0");
  EXPECT_EQ(w["final_checksum"], std::to_string(done.param_checksum()));
  EXPECT_EQ(w["final_step"], "6");

  ASSERT_OK(Start());  // a restarted coordinator: the same witness, from the job's record
  EXPECT_EQ(Ok(Call(kAlice, "/api/v1/jobs/" + job.id() + "/witness")), w);
}

// Each worker's step times, rank order beside Job.workers: the latest step's and the mean
// over its steps. The fakes answer step_ms = 10 * (rank + 1) + the step's number (0..5),
// compute_ms = rank + 1.
TEST_F(DashboardApiTest, AJobHasEachWorkersLatestAndMeanStepTimes) {
  Register(2);
  ASSERT_OK(Start());
  const std::string id = Submit("alice");
  ASSERT_EQ(AwaitEnd(id).state(), v1::SUCCEEDED);
  const nlohmann::json job = Ok(Call(kAlice, "/api/v1/jobs/" + id));
  ASSERT_EQ(job["worker_times"].size(), 2u) << job;
  for (int r = 0; r < 2; ++r) {
    const nlohmann::json& t = job["worker_times"][r];
    EXPECT_EQ(t["worker"], job["workers"][r]) << t;
    EXPECT_EQ(t["steps"], "6");
    EXPECT_EQ(t["last"]["step_ms"], 10.0 * (r + 1) + 5);
    EXPECT_EQ(t["mean"]["step_ms"], 10.0 * (r + 1) + 2.5);
    EXPECT_EQ(t["last"]["compute_ms"], r + 1.0);
    EXPECT_EQ(t["mean"]["compute_ms"], r + 1.0);
    EXPECT_EQ(t["mean"]["allreduce_ms"], 0.5);
    EXPECT_EQ(t["mean"]["update_ms"], 0.25);
  }
  ASSERT_OK(Start());  // kept in the job's record
  EXPECT_EQ(Ok(Call(kAlice, "/api/v1/jobs/" + id))["worker_times"], job["worker_times"]);
}

TEST_F(DashboardApiTest, AJobsWorkersInRankOrderAndAllWorkersForAdminsOnly) {
  Register(2);
  ASSERT_OK(Start());
  const std::string id = Submit("alice");
  ASSERT_EQ(AwaitEnd(id).state(), v1::SUCCEEDED);
  std::vector<std::string> ids;
  for (const auto& w : Ok(Call(kAlice, "/api/v1/jobs/" + id + "/workers"), "workers")) {
    ids.push_back(w["id"]);
    EXPECT_THAT(w["address"].get<std::string>(), HasSubstr("fake:"));
  }
  EXPECT_THAT(ids, ElementsAre("w0000", "w0001"));
  const HttpReply r = Call(kAlice, "/api/v1/workers");
  EXPECT_EQ(r.code, 403);
  EXPECT_THAT(r.body, HasSubstr("for admins"));
  ids.clear();
  for (const auto& w : Ok(Call(kRoot, "/api/v1/workers"), "workers")) ids.push_back(w["id"]);
  EXPECT_THAT(ids, UnorderedElementsAre("w0000", "w0001"));
}

TEST_F(DashboardApiTest, AJobsWorkersDoNotNameAnotherUsersJobTheyRunNow) {
  Register(2);
  FakeWorker hang;
  hang.hang_prepare = true;  // bob's job holds the workers, preparing, until cancelled
  ASSERT_OK(Start({FakeWorker{}, FakeWorker{}, hang, hang}));
  const std::string alices = Submit("alice");
  ASSERT_EQ(AwaitEnd(alices).state(), v1::SUCCEEDED);
  const std::string bobs = Submit("bob");
  AwaitState(bobs, v1::RUNNING);
  factory_->clients[2]->AwaitPrepare();
  for (const auto& w : Ok(Call(kAlice, "/api/v1/jobs/" + alices + "/workers"), "workers")) {
    EXPECT_EQ(w["job_id"], "") << w;
  }
  EXPECT_EQ(Ok(Call(kBob, "/api/v1/jobs/" + bobs + "/workers"), "workers")[0]["job_id"], bobs);
  ASSERT_OK(jobs_->Cancel(bobs).status());
  EXPECT_EQ(AwaitEnd(bobs).state(), v1::CANCELLED);
}

TEST_F(DashboardApiTest, LogsAreTheNewestLinesInTimeOrder) {
  ASSERT_OK(Start());
  const std::string id = Submit("alice");
  for (int i = 0; i < 5; ++i) {
    v1::LogLine line;
    line.set_job(id);
    line.set_unix_ms(1000 + (i % 2 == 0 ? i : 10 + i));  // arrival order is not time order
    line.set_message(absl::StrCat("line ", i));
    jobs_->AppendLog(line);
  }
  std::vector<std::string> messages;
  for (const auto& l : Ok(Call(kAlice, "/api/v1/jobs/" + id + "/logs", {{"tail", "3"}}), "lines")) {
    messages.push_back(l["message"]);
  }
  EXPECT_THAT(messages, ElementsAre("line 4", "line 1", "line 3"));
  EXPECT_EQ(Call(kAlice, "/api/v1/jobs/" + id + "/logs", {{"tail", "0"}}).code, 400);
}

}  // namespace
}  // namespace lockstep::testing
