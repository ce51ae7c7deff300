// A real Prometheus server (Debian's `prometheus`) scrapes a local cluster running a job,
// and the test reads Lockstep's metrics back through Prometheus's HTTP API
// (/api/v1/query): the job's step from the coordinator, the steps and all-reduced bytes
// from the workers. Skipped, saying so, only where no prometheus binary is installed
// (scripts/install-deps installs it). A second test holds 50 idle connections open on every
// target while Prometheus scrapes them. A third reads the coordinator's /metrics page
// itself: a watch its client closes (`lockstep watch JOB | head`) is no RPC error.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "core/testing.h"
#include "services/common/observability/http_testing.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// The prometheus binary on $PATH (or /usr/bin's); "" if none.
std::string FindPrometheus() {
  std::vector<std::string> dirs = {"/usr/bin"};
  if (const char* path = std::getenv("PATH")) dirs = absl::StrSplit(path, ':');
  for (const std::string& d : dirs) {
    const fs::path p = fs::path(d) / "prometheus";
    if (access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

// A port nobody listens on now (bound and released: Prometheus takes it next).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// `n` connections to each of `targets` (host:port) held open, idle: half send nothing, half
// half a request, as slow or hostile clients would. One the server closes (its idle
// timeout) is opened again at once, so that there are always n. Stops on destruction.
class IdleClients {
 public:
  IdleClients(const std::vector<std::string>& targets, int n) : wake_(eventfd(0, EFD_CLOEXEC)) {
    for (const std::string& t : targets) {
      for (int i = 0; i < n; ++i) {
        conns_.push_back({std::stoi(t.substr(t.rfind(':') + 1)), i % 2 == 1, -1});
        Open(conns_.back());
      }
    }
    thread_ = std::thread([this] { Hold(); });
  }
  ~IdleClients() {
    const uint64_t one = 1;
    EXPECT_EQ(write(wake_, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
    thread_.join();
    for (const Conn& c : conns_) close(c.fd);
    close(wake_);
  }
  int opened() const { return opened_; }  // how many it opened in all (past n: reopened)

 private:
  struct Conn {
    int port;
    bool half_request;
    int fd;
  };
  void Open(Conn& c) {
    if (c.fd >= 0) close(c.fd);
    c.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(c.port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && c.half_request) {
      send(c.fd, "GET /metr", 9, MSG_NOSIGNAL);
    }
    ++opened_;
  }
  // Waits for closes (or the destructor's wake-up) and reopens what was closed.
  void Hold() {
    while (true) {
      std::vector<pollfd> fds = {{wake_, POLLIN, 0}};
      for (const Conn& c : conns_) fds.push_back({c.fd, POLLIN, 0});
      if (poll(fds.data(), fds.size(), -1) < 0) continue;
      if (fds[0].revents != 0) return;
      for (size_t i = 1; i < fds.size(); ++i) {
        char buf[256];
        if (fds[i].revents != 0 && read(fds[i].fd, buf, sizeof(buf)) <= 0) Open(conns_[i - 1]);
      }
    }
  }

  const int wake_;
  std::vector<Conn> conns_;
  std::atomic<int> opened_{0};
  std::thread thread_;
};

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
      out += static_cast<char>(c);
    } else {
      absl::StrAppend(&out, absl::StrFormat("%%%02X", c));
    }
  }
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A Prometheus server scraping a cluster: skipped where no prometheus binary is installed.
class PrometheusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    prometheus_binary_ = FindPrometheus();
    if (prometheus_binary_.empty()) {
      GTEST_SKIP() << "no prometheus binary on PATH (Debian package `prometheus`; "
                      "scripts/install-deps installs it)";
    }
  }
  void TearDown() override {
    if (prometheus_ > 0) StopProcesses({prometheus_}, absl::Seconds(5));
  }
  // The value of `query`'s one sample, through the API; NOT_FOUND while it has none.
  absl::StatusOr<double> Query(const std::string& query) {
    absl::StatusOr<std::string> body = HttpGet(port_, "/api/v1/query?query=" + UrlEncode(query));
    if (!body.ok()) return body.status();
    const nlohmann::json answer = nlohmann::json::parse(*body, nullptr, false);
    if (answer.is_discarded() || answer.value("status", "") != "success") {
      return absl::InternalError(absl::StrCat("Prometheus answered ", *body));
    }
    const nlohmann::json& result = answer["data"]["result"];
    if (result.empty()) return absl::NotFoundError(absl::StrCat("no sample for ", query));
    return std::stod(result[0]["value"][1].get<std::string>());
  }
  // Polls `query` until its value is `want` (Prometheus scrapes every second).
  void ExpectEventually(const std::string& query, double want) {
    absl::StatusOr<double> got;
    const absl::Time end = absl::Now() + absl::Seconds(60);
    while (absl::Now() < end) {
      got = Query(query);
      if (got.ok() && *got == want) return;
      absl::SleepFor(absl::Milliseconds(500));
    }
    ADD_FAILURE() << query << ": " << (got.ok() ? std::to_string(*got) : got.status().ToString())
                  << ", want " << want << "\n"
                  << ReadFile(dir_ + "/prometheus.log");
  }

  // A cluster of `workers` workers serving /metrics, in folder dir_, its targets in
  // targets_; INTERNAL with its logs when a target is missing.
  absl::StatusOr<std::unique_ptr<LocalCluster>> StartScrapedCluster(int workers) {
    ClusterOptions options;
    options.workers = workers;
    options.metrics = true;
    ASSIGN_OR_RETURN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(options));
    dir_ = cluster->dir();
    const std::vector<std::string> targets = cluster->processes().MetricsAddresses();
    if (targets.size() != static_cast<size_t>(workers) + 1 ||
        std::find(targets.begin(), targets.end(), "") != targets.end()) {
      return absl::InternalError(
          absl::StrCat("metrics targets [", absl::StrJoin(targets, ", "), "]\n", cluster->Logs()));
    }
    targets_ = targets;
    return cluster;
  }
  // Starts Prometheus scraping targets_ every second under the job names of
  // deploy/prometheus/prometheus.yml; `global` adds to its global settings.
  absl::Status StartPrometheus(absl::string_view global = "") {
    std::ofstream(dir_ + "/prometheus.yml")
        << "global: {scrape_interval: 1s, " << global << "evaluation_interval: 1s}\n"
        << "scrape_configs:\n"
        << "  - job_name: lockstep-coordinator\n"
        << "    static_configs: [{targets: ['" << targets_[0] << "']}]\n"
        << "  - job_name: lockstep-worker\n"
        << "    static_configs: [{targets: ['"
        << absl::StrJoin(targets_.begin() + 1, targets_.end(), "', '") << "']}]\n";
    port_ = FreePort();
    ASSIGN_OR_RETURN(prometheus_,
                     SpawnServer({prometheus_binary_, "--config.file=" + dir_ + "/prometheus.yml",
                                  "--storage.tsdb.path=" + dir_ + "/tsdb",
                                  absl::StrCat("--web.listen-address=127.0.0.1:", port_)},
                                 dir_ + "/prometheus.log"));
    return absl::OkStatus();
  }

  std::string prometheus_binary_;
  std::string dir_;
  std::vector<std::string> targets_;  // host:port of the cluster's /metrics, coordinator first
  int port_ = 0;
  pid_t prometheus_ = -1;
};

TEST_F(PrometheusTest, PrometheusScrapesAClusterRunningAJobAndAnswersQueries) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, StartScrapedCluster(2));
  ASSERT_OK(StartPrometheus());

  constexpr int kSteps = 40;
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster->Submit(MlpSpec(2, kSteps)));
  ASSERT_OK_AND_ASSIGN(v1::Job done, cluster->WaitFor(job.id(), absl::Seconds(120)));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << cluster->Logs();

  // Both targets up, then the coordinator's series of the job and the workers' counters.
  ExpectEventually("sum(up{job=~\"lockstep-.*\"})", 3);
  ExpectEventually(absl::StrCat("lockstep_job_step{job_id=\"", job.id(), "\"}"), kSteps);
  ExpectEventually("lockstep_jobs{state=\"SUCCEEDED\"}", 1);
  ExpectEventually("sum(lockstep_worker_steps_total)", 2 * kSteps);
  ExpectEventually("count(lockstep_worker_allreduce_bytes_total > 0)", 2);
  ExpectEventually("sum(lockstep_step_phase_seconds_count{phase=\"compute\"})", kSteps);
}

TEST_F(PrometheusTest, ScrapesSucceedWhileFiftyIdleConnectionsAreHeldOpenOnEachTarget) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, StartScrapedCluster(1));
  // Before, one connection at a time: each idle one held a scrape back 2 s, five made
  // every scrape time out.
  IdleClients idle(targets_, 50);
  // Scrapes every second, each given 1 s (Prometheus's scrape_timeout).
  ASSERT_OK(StartPrometheus("scrape_timeout: 1s, "));
  ExpectEventually("sum(up{job=~\"lockstep-.*\"})", 2);
  // Then every scrape of the last 20 s succeeded on both, each well within its 1 s: longer
  // than the servers' 10 s idle timeout, so IdleClients had to open some of its
  // connections again (there were 50 on each target all along).
  ExpectEventually(
      "count(min_over_time(up{job=~\"lockstep-.*\"}[20s]) == 1 and "
      "count_over_time(up{job=~\"lockstep-.*\"}[20s]) >= 18)",
      2);
  ExpectEventually("count(max_over_time(scrape_duration_seconds{job=~\"lockstep-.*\"}[20s]) < 0.9)",
                   2);
  EXPECT_GT(idle.opened(), 100);
}

// The value of `series` (its name and labels as the page writes them) on a /metrics page.
absl::StatusOr<double> Sample(const std::string& page, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(page, '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      return std::stod(std::string(line.substr(series.size() + 1)));
    }
  }
  return absl::NotFoundError(absl::StrCat("no ", series));
}

TEST(CoordinatorMetricsPageTest, AWatchItsClientClosesIsCountedAsCancelledNotAsAnError) {
  ClusterOptions options;
  options.workers = 1;
  options.metrics = true;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(options));
  const std::string target = cluster->processes().MetricsAddresses().at(0);
  const int port = std::stoi(target.substr(target.rfind(':') + 1));
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster->Submit(MlpSpec(1, 100000)));
  // `lockstep watch JOB | head -1`: one event read, then the stream is closed.
  grpc::ClientContext ctx;
  v1::WatchJobRequest req;
  req.set_id(job.id());
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = cluster->jobs().WatchJob(&ctx, req);
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));
  ctx.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The coordinator counts the stream when it sees the cancel: poll its page for it.
  const std::string cancelled =
      "lockstep_rpc_cancelled_total{method=\"lockstep.v1.JobService/WatchJob\"}";
  absl::StatusOr<std::string> page;
  const absl::Time end = absl::Now() + absl::Seconds(30);
  while (absl::Now() < end) {
    page = HttpGet(port, "/metrics");
    if (page.ok() && Sample(*page, cancelled).ok()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_OK(page.status());
  EXPECT_EQ(Sample(*page, cancelled).value_or(-1), 1) << *page;
  EXPECT_THAT(*page, Not(HasSubstr("code=\"CANCELLED\""))) << *page;
  ASSERT_OK(cluster->Cancel(job.id()).status());
}

}  // namespace
}  // namespace lockstep::testing
