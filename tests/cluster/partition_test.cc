// A network partition, for real: one of a job's two workers runs in a network namespace
// of its own (a veth pair to this one), and every packet in or out of it is dropped
// silently (iptables DROP inside the namespace) while the job runs. The job recovers onto
// a spare and ends with the undisturbed run's checksum; once the partition heals, the
// worker registers again. Needs root (CI runs as root); skipped otherwise.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/testing.h"
#include "lockstep/v1/job.grpc.pb.h"
#include "services/common/flags.h"
#include "services/common/rpc/job_state.h"
#include "services/common/rpc/net.h"
#include "services/common/rpc/status.h"
#include "services/common/security/credentials.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;

bool Sh(const std::string& command) { return std::system((command + " >&2").c_str()) == 0; }

// A namespace with 10.231.0.2 on its end of a veth pair; this one has 10.231.0.1.
class Netns {
 public:
  Netns() : name_(absl::StrCat("lockstep-", getpid())), host_(absl::StrCat("lsh", getpid())) {}
  ~Netns() { Sh("ip netns del " + name_ + " 2>/dev/null"); }  // the veth pair goes with it
  bool Up() {
    const std::string in = "ip netns exec " + name_ + " ";
    return Sh("ip netns add " + name_) &&
           Sh("ip link add " + host_ + " type veth peer name lsn0 netns " + name_) &&
           Sh("ip addr add 10.231.0.1/24 dev " + host_) && Sh("ip link set " + host_ + " up") &&
           Sh(in + "ip addr add 10.231.0.2/24 dev lsn0") && Sh(in + "ip link set lsn0 up") &&
           Sh(in + "ip link set lo up");
  }
  bool Partition() {
    const std::string in = "ip netns exec " + name_ + " iptables ";
    return Sh(in + "-A INPUT -i lsn0 -j DROP") && Sh(in + "-A OUTPUT -o lsn0 -j DROP");
  }
  bool Heal() { return Sh("ip netns exec " + name_ + " iptables -F"); }
  const std::string& name() const { return name_; }

 private:
  const std::string name_, host_;
};

class PartitionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || !fs::exists("/usr/sbin/ip") || !fs::exists("/usr/sbin/iptables")) {
      GTEST_SKIP() << "needs root, ip and iptables (network namespaces)";
    }
    if (!netns_.Up()) GTEST_SKIP() << "network namespaces are not available here";
    dir_ = (fs::temp_directory_path() / absl::StrCat("lockstep-partition-", getpid())).string();
    fs::create_directories(dir_ + "/logs");
    // Off loopback, so TLS as a deployment has it (plaintext would be refused here).
    ASSERT_OK(MakeCredentials({Credentials(), {}, {}}));
    const TlsFiles tls = CoordinatorTls(Credentials());
    auto pid = SpawnServer({BinaryPath("lockstep-coordinator"), "--listen=10.231.0.1:0",
                            "--state_dir=" + dir_ + "/state", "--port_file=" + dir_ + "/port",
                            "--tls_ca=" + tls.ca, "--tls_cert=" + tls.cert, "--tls_key=" + tls.key,
                            "--tokens_file=" + TokensFile(Credentials())},
                           dir_ + "/logs/coordinator.log");
    ASSERT_OK(pid.status());
    pids_.push_back(*pid);
    const std::string port = ReadPortFile(dir_ + "/port", absl::Seconds(20));
    ASSERT_FALSE(port.empty()) << "the coordinator did not start";
    address_ = "10.231.0.1:" + port;
    std::ifstream token_file(TokenFile(Credentials(), "admin"));
    std::string token;
    token_file >> token;
    auto client = Transport::Tls(ClientTls(Credentials()));
    ASSERT_OK(client.status());
    stub_ = v1::JobService::NewStub(MakeChannel(address_, *client, kCoordinatorIdentity, token));
  }
  void TearDown() override {
    StopProcesses(pids_, absl::ZeroDuration());
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // A worker on this side (10.231.0.1), or in the namespace (10.231.0.2).
  std::string Credentials() const { return dir_ + "/credentials"; }

  void StartWorker(const std::string& name, bool in_netns) {
    const std::string host = in_netns ? "10.231.0.2" : "10.231.0.1";
    // Each worker its own certificate, as a deployment gives them.
    EXPECT_OK(MakeCredentials({Credentials(), {}, {}, {name}}));
    const TlsFiles tls = WorkerTls(Credentials(), name);
    std::vector<std::string> argv = {BinaryPath("lockstep-worker"),
                                     "--coordinator=" + address_,
                                     "--listen=" + host + ":0",
                                     "--advertise_host=" + host,
                                     "--threads=1",
                                     "--name=" + name,
                                     "--tls_ca=" + tls.ca,
                                     "--tls_cert=" + tls.cert,
                                     "--tls_key=" + tls.key};
    if (in_netns) argv.insert(argv.begin(), {"/usr/sbin/ip", "netns", "exec", netns_.name()});
    auto pid = SpawnServer(argv, dir_ + "/logs/" + name + ".log");
    ASSERT_OK(pid.status());
    pids_.push_back(*pid);
    ASSERT_TRUE(AwaitWorker(name, absl::Seconds(30))) << name << " did not register";
  }
  // Whether a worker called `name` is registered within `timeout`.
  bool AwaitWorker(const std::string& name, absl::Duration timeout) {
    for (const absl::Time end = absl::Now() + timeout; absl::Now() < end;
         absl::SleepFor(absl::Milliseconds(100))) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
      v1::ListWorkersResponse resp;
      if (!stub_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok()) continue;
      for (const auto& w : resp.workers()) {
        if (w.name() == name) return true;
      }
    }
    return false;
  }
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec) {
    grpc::ClientContext ctx;
    v1::Job job;
    RETURN_IF_ERROR(FromGrpcStatus(stub_->SubmitJob(&ctx, spec, &job)));
    return job;
  }
  // Polls the job until done(job) or `timeout`.
  absl::StatusOr<v1::Job> Await(const std::string& id,
                                const std::function<bool(const v1::Job&)>& done,
                                absl::Duration timeout) {
    for (const absl::Time end = absl::Now() + timeout; absl::Now() < end;
         absl::SleepFor(absl::Milliseconds(20))) {
      grpc::ClientContext ctx;
      v1::GetJobRequest req;
      req.set_id(id);
      v1::Job job;
      RETURN_IF_ERROR(FromGrpcStatus(stub_->GetJob(&ctx, req, &job)));
      if (done(job)) return job;
    }
    return absl::DeadlineExceededError(absl::StrCat(id, " did not get there in time"));
  }
  absl::StatusOr<v1::Job> AwaitEnd(const std::string& id) {
    return Await(
        id, [](const v1::Job& j) { return IsTerminal(j.state()); }, absl::Minutes(3));
  }

  Netns netns_;
  std::string dir_, address_;
  std::vector<pid_t> pids_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

TEST_F(PartitionTest, AJobRecoversFromASilentlyPartitionedWorkerBitForBit) {
  StartWorker("host-0", false);
  StartWorker("netns-0", true);
  v1::JobSpec spec = MlpSpec(2, 600, 0.1, 128);
  spec.mutable_recovery()->set_snapshot_every_steps(50);

  // Undisturbed, across the veth pair.
  ASSERT_OK_AND_ASSIGN(v1::Job clean, Submit(spec));
  ASSERT_OK_AND_ASSIGN(v1::Job clean_done, AwaitEnd(clean.id()));
  ASSERT_EQ(clean_done.state(), v1::SUCCEEDED) << clean_done.failure_reason();

  ASSERT_OK_AND_ASSIGN(v1::Job job, Submit(spec));
  ASSERT_OK(Await(
                job.id(), [](const v1::Job& j) { return j.step() >= 120; }, absl::Minutes(2))
                .status());
  ASSERT_TRUE(netns_.Partition());
  const absl::Time cut = absl::Now();
  StartWorker("host-1", false);  // a spare on this side
  ASSERT_OK(Await(
                job.id(), [](const v1::Job& j) { return j.recoveries() >= 1; }, absl::Seconds(30))
                .status());
  EXPECT_LT(absl::Now() - cut, absl::Seconds(10)) << "the partition was found late";
  ASSERT_OK_AND_ASSIGN(v1::Job done, AwaitEnd(job.id()));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_GE(done.recoveries(), 1);
  EXPECT_EQ(done.param_checksum(), clean_done.param_checksum());

  // Healed: the worker finds the coordinator forgot it, and registers again.
  ASSERT_TRUE(netns_.Heal());
  EXPECT_TRUE(AwaitWorker("netns-0", absl::Seconds(30)));
}

}  // namespace
}  // namespace lockstep::testing
