// A real Prometheus server (Debian's `prometheus`) scrapes a local cluster running a job,
// and the test reads Lockstep's metrics back through Prometheus's HTTP API
// (/api/v1/query): the job's step from the coordinator, the steps and all-reduced bytes
// from the workers. Skipped, saying so, only where no prometheus binary is installed
// (scripts/install-deps installs it).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/testing.h"
#include "services/common/http_testing.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

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

class PrometheusTest : public ::testing::Test {
 protected:
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

  std::string dir_;
  int port_ = 0;
  pid_t prometheus_ = -1;
};

TEST_F(PrometheusTest, PrometheusScrapesAClusterRunningAJobAndAnswersQueries) {
  const std::string prometheus = FindPrometheus();
  if (prometheus.empty()) {
    GTEST_SKIP() << "no prometheus binary on PATH (Debian package `prometheus`; "
                    "scripts/install-deps installs it)";
  }
  ClusterOptions options;
  options.workers = 2;
  options.metrics = true;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(options));
  dir_ = cluster->dir();
  const std::vector<std::string> targets = cluster->processes().MetricsAddresses();
  ASSERT_EQ(targets.size(), 3u);
  for (const std::string& t : targets) ASSERT_FALSE(t.empty()) << cluster->Logs();

  // The scrape config, as deploy/prometheus/prometheus.yml's but for these ports.
  std::ofstream(dir_ + "/prometheus.yml")
      << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
      << "scrape_configs:\n"
      << "  - job_name: lockstep-coordinator\n"
      << "    static_configs: [{targets: ['" << targets[0] << "']}]\n"
      << "  - job_name: lockstep-worker\n"
      << "    static_configs: [{targets: ['" << targets[1] << "', '" << targets[2] << "']}]\n";
  port_ = FreePort();
  ASSERT_OK_AND_ASSIGN(prometheus_,
                       SpawnServer({prometheus, "--config.file=" + dir_ + "/prometheus.yml",
                                    "--storage.tsdb.path=" + dir_ + "/tsdb",
                                    absl::StrCat("--web.listen-address=127.0.0.1:", port_)},
                                   dir_ + "/prometheus.log"));

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

}  // namespace
}  // namespace lockstep::testing
