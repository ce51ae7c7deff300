// A port is one server's alone: a second coordinator or worker started on a port a running
// one serves (its gRPC port or its metrics port) exits 1 with a message naming the port,
// and the first serves on, unchanged. (`lockstep cluster up --port P` on a taken port:
// clients/cli/cluster_command_test.cc.)
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/testing.h"
#include "services/common/observability/http_testing.h"
#include "services/common/security/credentials.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string PortOf(const std::string& address) { return address.substr(address.rfind(':') + 1); }

// The wait status of our child `pid` once it exits; -1 when it still runs after `timeout`
// (it is killed then).
int WaitExit(pid_t pid, absl::Duration timeout) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  pollfd p = {fd, POLLIN, 0};
  const bool exited =
      fd >= 0 && poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 1;
  if (fd >= 0) close(fd);
  if (!exited) StopProcesses({pid}, absl::ZeroDuration());
  int status = -1;
  return exited && waitpid(pid, &status, 0) == pid ? status : -1;
}

class ExclusivePortsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterOptions options;
    options.workers = 1;
    options.metrics = true;
    ASSERT_OK_AND_ASSIGN(cluster_, LocalCluster::Start(options));
    credentials_ = cluster_->processes().credentials_dir();
  }
  // Runs `argv` to its end, its output in a log of its own: expects exit 1 and a line
  // naming `port` as in use.
  void ExpectExitOneNaming(std::vector<std::string> argv, const std::string& port) {
    const std::string log = absl::StrCat(cluster_->dir(), "/second-", ++runs_, ".log");
    ASSERT_OK_AND_ASSIGN(pid_t pid, SpawnServer(argv, log));
    const int status = WaitExit(pid, absl::Seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1)
        << argv[0] << " " << argv[1] << ": status " << status << "\n"
        << ReadFile(log);
    EXPECT_THAT(ReadFile(log), HasSubstr(absl::StrCat("port ", port, " is in use"))) << argv[1];
  }
  // The first cluster serves on: its worker, its metrics, and a job to the end.
  void ExpectTheFirstServes(const std::string& worker_id) {
    ASSERT_OK_AND_ASSIGN(v1::ListWorkersResponse workers, cluster_->Workers());
    ASSERT_EQ(workers.workers_size(), 1) << workers.DebugString();
    EXPECT_EQ(workers.workers(0).id(), worker_id);
    for (const std::string& metrics : cluster_->processes().MetricsAddresses()) {
      EXPECT_TRUE(HttpGet(std::stoi(PortOf(metrics)), "/metrics").ok()) << metrics;
    }
    ASSERT_OK_AND_ASSIGN(v1::Job job, cluster_->Submit(MlpSpec(1, 5)));
    ASSERT_OK_AND_ASSIGN(v1::Job done, cluster_->WaitFor(job.id(), absl::Seconds(120)));
    EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << cluster_->Logs();
  }
  std::vector<std::string> CoordinatorTlsFlags() const {
    const TlsFiles tls = CoordinatorTls(credentials_);
    return {"--tls_ca=" + tls.ca, "--tls_cert=" + tls.cert, "--tls_key=" + tls.key,
            "--tokens_file=" + TokensFile(credentials_)};
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::string credentials_;
  int runs_ = 0;
};

TEST_F(ExclusivePortsTest, ASecondCoordinatorOnATakenPortExitsOneNamingIt) {
  ASSERT_OK_AND_ASSIGN(v1::ListWorkersResponse before, cluster_->Workers());
  ASSERT_EQ(before.workers_size(), 1);
  const std::string port = PortOf(cluster_->address());
  const std::string state = cluster_->dir() + "/second-state";
  std::vector<std::string> argv = {BinaryPath("lockstep-coordinator"), "--listen=127.0.0.1:" + port,
                                   "--state_dir=" + state};
  for (const std::string& f : CoordinatorTlsFlags()) argv.push_back(f);
  ExpectExitOneNaming(argv, port);
  // Its metrics port taken (the first coordinator's), its gRPC port free.
  const std::string metrics = cluster_->processes().MetricsAddresses()[0];
  argv[1] = "--listen=127.0.0.1:0";
  argv.push_back("--metrics_listen=" + metrics);
  ExpectExitOneNaming(argv, PortOf(metrics));
  ExpectTheFirstServes(before.workers(0).id());
}

TEST_F(ExclusivePortsTest, ASecondWorkerOnATakenPortExitsOneNamingIt) {
  ASSERT_OK_AND_ASSIGN(v1::ListWorkersResponse before, cluster_->Workers());
  ASSERT_EQ(before.workers_size(), 1);
  const std::string port = PortOf(before.workers(0).address());
  // Its own certificate (identity "intruder"), as a deployment would give it: the port,
  // not the credentials, is what must stop it.
  ASSERT_OK(MakeCredentials({credentials_, {}, {}, {"intruder"}}));
  const TlsFiles tls = WorkerTls(credentials_, "intruder");
  std::vector<std::string> argv = {BinaryPath("lockstep-worker"),
                                   "--listen=127.0.0.1:" + port,
                                   "--coordinator=" + cluster_->address(),
                                   "--advertise_host=127.0.0.1",
                                   "--threads=1",
                                   "--name=intruder",
                                   "--tls_ca=" + tls.ca,
                                   "--tls_cert=" + tls.cert,
                                   "--tls_key=" + tls.key};
  ExpectExitOneNaming(argv, port);
  const std::string metrics = cluster_->processes().MetricsAddresses()[1];
  argv[1] = "--listen=127.0.0.1:0";
  argv.push_back("--metrics_listen=" + metrics);
  ExpectExitOneNaming(argv, PortOf(metrics));
  ExpectTheFirstServes(before.workers(0).id());
}

}  // namespace
}  // namespace lockstep::testing
