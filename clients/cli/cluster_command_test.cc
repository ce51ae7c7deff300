// `lockstep cluster up` supervises its servers: the real CLI binary as a child process,
// its servers killed with SIGKILL, their replacements checked through the coordinator's
// ListWorkers; the metrics addresses and the dashboard's URL it records and prints; and
// `cluster down` of a detached cluster.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "clients/cluster/cluster_processes.h"
#include "core/testing.h"
#include "lockstep/v1/job.grpc.pb.h"
#include "services/common/observability/http_testing.h"
#include "services/common/rpc/net.h"
#include "services/common/rpc/status.h"
#include "services/common/security/credentials.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::StatusIs;

const std::string kCli = std::string(LOCKSTEP_BINARY_DIR) + "/clients/lockstep";
// A restart waits 1 s, then a server needs a moment to come up and register.
constexpr absl::Duration kRecoveryTimeout = absl::Seconds(10);

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Whether `pid` is a live process (a zombie is not).
bool Alive(pid_t pid) {
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// Polls `done` every 100 ms until it holds; false after `timeout`.
bool WaitUntil(absl::Duration timeout, const std::function<bool()>& done) {
  const absl::Time end = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= end) return false;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return true;
}

// The cluster's name -> id of each registered worker; empty when the coordinator does not
// answer.
std::map<std::string, std::set<std::string>> Workers(const std::string& address,
                                                     const std::string& cluster_dir) {
  // As the cluster's admin, with the credentials `cluster up` made.
  const std::string credentials = cluster_dir + "/credentials";
  std::ifstream token_file(TokenFile(credentials, "admin"));
  std::string token;
  token_file >> token;
  absl::StatusOr<Transport> tls = Transport::Tls(ClientTls(credentials));
  if (!tls.ok()) return {};
  auto stub = v1::JobService::NewStub(MakeChannel(address, *tls, kCoordinatorIdentity, token));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  v1::ListWorkersResponse resp;
  std::map<std::string, std::set<std::string>> out;
  if (!stub->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok()) return out;
  for (const auto& w : resp.workers()) out[w.name()].insert(w.id());
  return out;
}

class ClusterCommandTest : public ::testing::Test {
 protected:
  ClusterCommandTest()
      : dir_((fs::temp_directory_path() /
              absl::StrCat("lockstep-cluster-up-", getpid(), "-", absl::ToUnixMicros(absl::Now())))
                 .string()) {
    fs::create_directories(dir_);
  }
  ~ClusterCommandTest() override {
    // A detached supervisor outlives a failed test otherwise; its servers die with it.
    if (nlohmann::json r = Record(); r.contains("supervisor")) {
      const pid_t supervisor = r["supervisor"].get<pid_t>();
      if (Alive(supervisor)) kill(supervisor, SIGKILL);
    }
    if (launcher_ > 0) StopProcesses({launcher_}, absl::ZeroDuration());
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs `lockstep cluster ARGS... --dir DIR` as a child, its output in DIR/launcher.log.
  pid_t Cli(std::vector<std::string> args) {
    args.insert(args.begin(), {kCli, "cluster"});
    args.insert(args.end(), {"--dir", dir_});
    absl::StatusOr<pid_t> pid = SpawnServer(args, dir_ + "/launcher.log");
    EXPECT_TRUE(pid.ok()) << pid.status();
    return pid.value_or(-1);
  }
  // Waits for the child `pid` to exit; its wait status, or -1 after `timeout`.
  int WaitExit(pid_t pid, absl::Duration timeout) {
    int status = -1;
    WaitUntil(timeout, [&] { return waitpid(pid, &status, WNOHANG) == pid; });
    return status;
  }
  // <dir>/cluster.json; empty while there is none.
  nlohmann::json Record() const {
    const std::string text = ReadFile(fs::path(dir_) / "cluster.json");
    return text.empty() ? nlohmann::json::object() : nlohmann::json::parse(text);
  }
  pid_t RecordedPid(int server) const { return Record().at("pids").at(server).get<pid_t>(); }
  std::string Logs() const {
    std::string out = "--- launcher.log\n" + ReadFile(fs::path(dir_) / "launcher.log");
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::path(dir_) / "logs", ec)) {
      absl::StrAppend(&out, "--- ", e.path().filename().string(), "\n", ReadFile(e.path()));
    }
    return out;
  }

  // Kills worker `index` and waits until a new process of that name registers (a new id)
  // and the record names its pid.
  void KillWorkerAndWaitForItsReplacement(int index) {
    const std::string address = Record().at("coordinator");
    const std::string name = absl::StrCat("worker-", index);
    const std::set<std::string> before = Workers(address, dir_)[name];
    ASSERT_EQ(before.size(), 1u) << Logs();
    const pid_t old = RecordedPid(1 + index);
    ASSERT_EQ(kill(old, SIGKILL), 0);
    EXPECT_TRUE(WaitUntil(kRecoveryTimeout,
                          [&] {
                            auto workers = Workers(address, dir_);
                            for (const std::string& id : workers[name]) {
                              if (!before.contains(id)) return true;
                            }
                            return false;
                          }))
        << name << " was not replaced\n"
        << Logs();
    const pid_t replacement = RecordedPid(1 + index);
    EXPECT_NE(replacement, old);
    EXPECT_TRUE(Alive(replacement));
  }

  const std::string dir_;
  pid_t launcher_ = -1;
};

TEST_F(ClusterCommandTest, ForegroundRestartsAKilledWorkerAndCoordinatorAndStopsOnSigterm) {
  launcher_ = Cli({"up", "--workers", "2", "--threads", "1"});
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] { return Record().contains("pids"); })) << Logs();
  const std::string address = Record().at("coordinator");
  ASSERT_TRUE(WaitUntil(absl::Seconds(10), [&] { return Workers(address, dir_).size() == 2; }))
      << Logs();

  KillWorkerAndWaitForItsReplacement(0);
  EXPECT_EQ(waitpid(launcher_, nullptr, WNOHANG), 0) << "the launcher exited\n" << Logs();
  EXPECT_THAT(ReadFile(fs::path(dir_) / "launcher.log"), HasSubstr("worker-0 killed by signal 9"));

  // The dashboard: on, its URL recorded and printed.
  const std::string dashboard = Record().at("dashboard");
  ASSERT_THAT(dashboard, ::testing::StartsWith("https://127.0.0.1:")) << Record().dump();
  EXPECT_THAT(ReadFile(fs::path(dir_) / "launcher.log"),
              HasSubstr(absl::StrCat("cluster up: dashboard ", dashboard, " (log in with")));
  const int dashboard_port = std::stoi(dashboard.substr(dashboard.rfind(':') + 1));

  // The coordinator comes back on its address; both workers register with it again.
  std::set<std::string> ids;
  for (const auto& [name, id] : Workers(address, dir_)) ids.insert(id.begin(), id.end());
  const pid_t coordinator = RecordedPid(0);
  ASSERT_EQ(kill(coordinator, SIGKILL), 0);
  EXPECT_TRUE(WaitUntil(kRecoveryTimeout,
                        [&] {
                          const auto workers = Workers(address, dir_);
                          int fresh = 0;
                          for (const auto& [name, id] : workers)
                            fresh += !ids.contains(*id.begin());
                          return workers.size() == 2 && fresh == 2;
                        }))
      << "the workers did not register with a restarted coordinator\n"
      << Logs();
  EXPECT_NE(RecordedPid(0), coordinator);
  EXPECT_EQ(Record().at("coordinator"), address);
  // Its dashboard too, on the same URL (HTTPS: a plain HTTP request gets no HTTP answer).
  EXPECT_EQ(Record().at("dashboard"), dashboard);
  EXPECT_THAT(testing::HttpGet(dashboard_port, "/"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no HTTP answer")));
  EXPECT_EQ(waitpid(launcher_, nullptr, WNOHANG), 0) << "the launcher exited\n" << Logs();

  const std::vector<pid_t> servers = Record().at("pids").get<std::vector<pid_t>>();
  ASSERT_EQ(kill(launcher_, SIGTERM), 0);
  const int status = WaitExit(launcher_, absl::Seconds(15));
  launcher_ = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << Logs();
  for (pid_t p : servers) EXPECT_FALSE(Alive(p)) << p;
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "cluster.json"));
}

TEST_F(ClusterCommandTest, DetachedClusterRestartsAKilledWorkerAndGoesDown) {
  const int up =
      WaitExit(Cli({"up", "--workers", "2", "--threads", "1", "--detach"}), absl::Seconds(60));
  ASSERT_TRUE(WIFEXITED(up) && WEXITSTATUS(up) == 0) << up << "\n" << Logs();
  const pid_t supervisor = Record().at("supervisor").get<pid_t>();
  EXPECT_TRUE(Alive(supervisor));
  const std::string address = Record().at("coordinator");
  ASSERT_TRUE(WaitUntil(absl::Seconds(10), [&] { return Workers(address, dir_).size() == 2; }))
      << Logs();

  // Every server's metrics, where the record says and the launcher printed.
  const nlohmann::json metrics = Record().at("metrics");
  const std::vector<std::string> workers = metrics.at("workers").get<std::vector<std::string>>();
  ASSERT_EQ(workers.size(), 2u) << metrics.dump();
  const std::string coordinator_metrics = metrics.at("coordinator");
  EXPECT_THAT(
      ReadFile(fs::path(dir_) / "launcher.log"),
      HasSubstr(absl::StrCat("Prometheus metrics (GET /metrics, plain HTTP on loopback): "
                             "coordinator ",
                             coordinator_metrics, ", workers ", workers[0], " ", workers[1])));
  auto page = [](const std::string& address) {
    const int port = std::stoi(address.substr(address.rfind(':') + 1));
    return testing::HttpGet(port, "/metrics").value_or("");
  };
  // The coordinator counts the registered workers on its scheduler's next round.
  EXPECT_TRUE(WaitUntil(absl::Seconds(5), [&] {
    return page(coordinator_metrics).find("\nlockstep_workers 2\n") != std::string::npos;
  })) << page(coordinator_metrics);
  EXPECT_THAT(page(workers[0]), HasSubstr("lockstep_worker_heartbeats_total{result=\"ok\"}"));

  KillWorkerAndWaitForItsReplacement(1);
  EXPECT_THAT(ReadFile(fs::path(dir_) / "logs" / "supervisor.log"),
              HasSubstr("worker-1 killed by signal 9"));
  // The replacement serves its metrics on a port of its own, and the record says where.
  std::string replaced;
  EXPECT_TRUE(WaitUntil(absl::Seconds(10), [&] {
    replaced = Record().at("metrics").at("workers").at(1);
    return !replaced.empty() && replaced != workers[1];
  })) << Record().dump();
  EXPECT_THAT(page(replaced), HasSubstr("lockstep_worker_registrations_total 1"));

  const std::vector<pid_t> servers = Record().at("pids").get<std::vector<pid_t>>();
  const int down = WaitExit(Cli({"down"}), absl::Seconds(30));
  EXPECT_TRUE(WIFEXITED(down) && WEXITSTATUS(down) == 0) << down << "\n" << Logs();
  EXPECT_THAT(ReadFile(fs::path(dir_) / "launcher.log"), HasSubstr("cluster down: stopped 3"));
  EXPECT_FALSE(Alive(supervisor));
  for (pid_t p : servers) EXPECT_FALSE(Alive(p)) << p;
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "cluster.json"));
}

// `--restart never` and `cluster add-worker` (docs/elastic.md's walkthrough): a killed
// worker stays gone, as the record and the supervisor's log say, and a worker added on
// request registers, is recorded, and goes down with the cluster.
TEST_F(ClusterCommandTest, RestartNeverLeavesAKilledWorkerGoneAndAddWorkerStartsAnother) {
  const int up =
      WaitExit(Cli({"up", "--workers", "2", "--threads", "1", "--restart", "never", "--detach"}),
               absl::Seconds(60));
  ASSERT_TRUE(WIFEXITED(up) && WEXITSTATUS(up) == 0) << up << "\n" << Logs();
  const std::string address = Record().at("coordinator");
  ASSERT_TRUE(WaitUntil(absl::Seconds(10), [&] { return Workers(address, dir_).size() == 2; }))
      << Logs();

  ASSERT_GT(RecordedPid(2), 0);
  ASSERT_EQ(kill(RecordedPid(2), SIGKILL), 0);
  EXPECT_TRUE(WaitUntil(absl::Seconds(10), [&] { return RecordedPid(2) == -1; })) << Logs();
  const std::string supervisor_log = ReadFile(fs::path(dir_) / "logs" / "supervisor.log");
  EXPECT_THAT(supervisor_log, HasSubstr("worker-1 killed by signal 9"));
  EXPECT_THAT(supervisor_log, HasSubstr("not restarted (--restart never)"));

  const int added = WaitExit(Cli({"add-worker"}), absl::Seconds(90));
  EXPECT_TRUE(WIFEXITED(added) && WEXITSTATUS(added) == 0) << added << "\n" << Logs();
  EXPECT_THAT(ReadFile(fs::path(dir_) / "launcher.log"),
              HasSubstr("cluster add-worker: worker-2 registered as "));
  EXPECT_EQ(Record().at("workers"), 3);
  EXPECT_EQ(Record().at("added"), 1);
  const pid_t newcomer = RecordedPid(3);
  EXPECT_TRUE(Alive(newcomer));
  EXPECT_EQ(Workers(address, dir_)["worker-2"].size(), 1u) << Logs();

  const int down = WaitExit(Cli({"down"}), absl::Seconds(30));
  EXPECT_TRUE(WIFEXITED(down) && WEXITSTATUS(down) == 0) << down << "\n" << Logs();
  EXPECT_FALSE(Alive(newcomer));
  // Without a cluster: exit 1 naming the folder.
  const int none = WaitExit(Cli({"add-worker"}), absl::Seconds(30));
  EXPECT_TRUE(WIFEXITED(none) && WEXITSTATUS(none) == 1) << none;
  EXPECT_THAT(ReadFile(fs::path(dir_) / "launcher.log"), HasSubstr("no cluster recorded in"));
}

// A record from before supervision names no supervisor: `down` stops the servers it lists.
TEST_F(ClusterCommandTest, ASecondClusterUpOnATakenPortExitsOneNamingItAndTheFirstServesOn) {
  const int up =
      WaitExit(Cli({"up", "--workers", "1", "--threads", "1", "--detach"}), absl::Seconds(60));
  ASSERT_TRUE(WIFEXITED(up) && WEXITSTATUS(up) == 0) << up << "\n" << Logs();
  const std::string address = Record().at("coordinator");
  const std::string port = address.substr(address.rfind(':') + 1);
  ASSERT_EQ(Workers(address, dir_).size(), 1u) << Logs();

  // Before, with gRPC's SO_REUSEPORT, the second cluster started on the same port.
  const std::string second_dir = dir_ + "/second";
  absl::StatusOr<pid_t> second =
      SpawnServer({kCli, "cluster", "up", "--workers", "1", "--port", port, "--dir", second_dir},
                  dir_ + "/second.log");
  ASSERT_TRUE(second.ok()) << second.status();
  const int status = WaitExit(*second, absl::Seconds(30));
  if (status == -1) StopProcesses({*second}, absl::ZeroDuration());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status << "\n"
                                                             << ReadFile(dir_ + "/second.log");
  EXPECT_THAT(ReadFile(dir_ + "/second.log"), HasSubstr(absl::StrCat("port ", port, " is in use")));
  EXPECT_FALSE(fs::exists(second_dir + "/cluster.json"));

  // The first serves on, alone.
  EXPECT_EQ(Workers(address, dir_).size(), 1u) << Logs();
  const int down = WaitExit(Cli({"down"}), absl::Seconds(30));
  EXPECT_TRUE(WIFEXITED(down) && WEXITSTATUS(down) == 0) << down << "\n" << Logs();
}

TEST_F(ClusterCommandTest, DownStopsTheServersOfARecordWithoutASupervisor) {
  ClusterOptions options;
  options.dir = dir_;
  options.coordinator_binary = std::string(LOCKSTEP_BINARY_DIR) + "/services/lockstep-coordinator";
  options.worker_binary = std::string(LOCKSTEP_BINARY_DIR) + "/services/lockstep-worker";
  options.workers = 1;
  auto cluster = ClusterProcesses::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status() << "\n" << Logs();
  const std::vector<pid_t> servers = (*cluster)->pids();
  std::ofstream(fs::path(dir_) / "cluster.json")
      << nlohmann::json{{"coordinator", (*cluster)->address()}, {"pids", servers}, {"workers", 1}};
  const int down = WaitExit(Cli({"down"}), absl::Seconds(30));
  EXPECT_TRUE(WIFEXITED(down) && WEXITSTATUS(down) == 0) << down << "\n" << Logs();
  EXPECT_THAT(ReadFile(fs::path(dir_) / "launcher.log"), HasSubstr("cluster down: stopped 2"));
  for (pid_t p : servers) EXPECT_FALSE(Alive(p)) << p;  // our children: zombies until reaped
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "cluster.json"));
}

}  // namespace
}  // namespace lockstep
