// Server logs about jobs, across real processes (TLS and tokens, as deployed): with
// LOCKSTEP_LOG_FORMAT=json both servers write JSON lines, and every line about a job
// carries its id and, where it concerns one worker, the worker's id and rank; the
// coordinator keeps the job's lines, its own and those its workers shipped with their
// heartbeats, for JobService.WatchLogs. (Its access checks are in security_test.)
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/testing.h"
#include "services/common/rpc/status.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {
namespace {

using json = nlohmann::json;

// The JSON lines of a server's log file (other lines, e.g. a library's own, skipped).
std::vector<json> JsonLines(const std::string& path, int* not_json) {
  std::ifstream in(path);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) {
      out.push_back(std::move(j));
    } else if (absl::StrContains(line, "[job-")) {
      ++*not_json;  // a line about a job in text
    }
  }
  return out;
}

// The job's log lines, by WatchLogs, following them until the coordinator closes the log.
std::vector<v1::LogLine> WatchLogs(LocalCluster& c, const std::string& id, bool follow) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  v1::WatchLogsRequest req;
  req.set_id(id);
  req.set_follow(follow);
  auto reader = c.jobs().WatchLogs(&ctx, req);
  std::vector<v1::LogLine> lines;
  for (v1::JobEvent e; reader->Read(&e);) {
    EXPECT_TRUE(e.has_log()) << e.DebugString();
    lines.push_back(e.log());
  }
  EXPECT_OK(FromGrpcStatus(reader->Finish()));
  return lines;
}

TEST(Logs, EveryLineAboutAJobCarriesItsIdWorkerAndRankAndWatchLogsServesThem) {
  setenv("LOCKSTEP_LOG_FORMAT", "json", 1);  // the servers inherit it
  auto c = LocalCluster::Start(2);
  unsetenv("LOCKSTEP_LOG_FORMAT");
  ASSERT_OK(c);
  ASSERT_OK_AND_ASSIGN(v1::Job job, (*c)->Submit(MlpSpec(2, 30)));
  ASSERT_OK_AND_ASSIGN(v1::Job done, (*c)->WaitFor(job.id(), absl::Minutes(2)));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  ASSERT_EQ(done.workers_size(), 2);
  const std::map<std::string, int> rank_of = {{done.workers(0), 0}, {done.workers(1), 1}};

  // WatchLogs: the coordinator's lines and each worker's, shipped with its heartbeats.
  const std::vector<v1::LogLine> lines = WatchLogs(**c, job.id(), /*follow=*/true);
  std::set<std::string> seen;
  for (const v1::LogLine& l : lines) {
    EXPECT_EQ(l.job(), job.id());
    EXPECT_FALSE(l.level().empty());
    EXPECT_GT(l.unix_ms(), 0);
    if (!l.worker().empty()) {
      ASSERT_TRUE(rank_of.contains(l.worker())) << l.DebugString();
      EXPECT_EQ(l.rank(), rank_of.at(l.worker())) << l.DebugString();
    }
    if (l.source() == "coordinator") {
      if (absl::StartsWith(l.message(), "SUCCEEDED")) seen.insert("coordinator: succeeded");
      if (l.has_rank()) seen.insert(absl::StrCat("coordinator: rank ", l.rank()));
    } else {
      EXPECT_TRUE(absl::StartsWith(l.source(), "worker-")) << l.DebugString();  // its --name
      EXPECT_TRUE(l.has_rank()) << l.DebugString();
      if (absl::StartsWith(l.message(), "prepared")) {
        seen.insert(absl::StrCat("worker: prepared rank ", l.rank()));
      }
    }
  }
  EXPECT_EQ(seen, (std::set<std::string>{"coordinator: succeeded", "coordinator: rank 0",
                                         "coordinator: rank 1", "worker: prepared rank 0",
                                         "worker: prepared rank 1"}));
  // Without follow: what is kept, at once (the log is closed by now anyway).
  EXPECT_EQ(WatchLogs(**c, job.id(), /*follow=*/false).size(), lines.size());

  // The servers' own log files: JSON lines, those about the job with its id, worker, rank.
  int not_json = 0;
  int about_job = 0, with_rank = 0;
  for (const std::string& file : {"coordinator", "worker-0", "worker-1"}) {
    const std::vector<json> logged =
        JsonLines(absl::StrCat((*c)->dir(), "/logs/", file, ".log"), &not_json);
    EXPECT_GT(logged.size(), 0u) << file;
    for (const json& j : logged) {
      EXPECT_TRUE(j.contains("ts") && j.contains("level") && j.contains("msg")) << j.dump();
      if (j.value("job", "") != job.id()) continue;
      ++about_job;
      if (!j.contains("worker")) continue;
      const std::string worker = j["worker"];
      ASSERT_TRUE(rank_of.contains(worker)) << j.dump();
      if (file != "coordinator") EXPECT_TRUE(j.contains("rank")) << j.dump();
      if (j.contains("rank")) {
        EXPECT_EQ(j["rank"].get<int>(), rank_of.at(worker)) << j.dump();
        ++with_rank;
      }
    }
  }
  EXPECT_EQ(not_json, 0) << "lines about a job in text";
  EXPECT_GE(about_job, 8);
  EXPECT_GE(with_rank, 6);  // each worker's prepare lines and release, the coordinator's ranks
}

}  // namespace
}  // namespace lockstep::testing
