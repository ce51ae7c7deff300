// The attacks of issue 10, each against a real cluster (`lockstep cluster up`'s
// processes, TLS and tokens by default): every one is refused with UNAUTHENTICATED or
// PERMISSION_DENIED. The same attacks against an --insecure cluster succeed, so that these
// tests can fail. And garbage on every port (gRPC and Gloo) harms nothing. (Calls on a worker's own
// service are in services/worker/service_test.)
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "clients/cluster/cluster_processes.h"
#include "core/status_macros.h"
#include "core/testing.h"
#include "lockstep/v1/registry.grpc.pb.h"
#include "services/common/rpc/job_state.h"
#include "services/common/rpc/net.h"
#include "services/common/rpc/status.h"
#include "services/common/security/credentials.h"
#include "tests/cluster/local_cluster.h"
#include "tests/cluster/security_testing.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

TEST(Security, ClientsWithoutAValidTokenAreUnauthenticated) {
  auto c = Start(false);
  ASSERT_NE(c, nullptr);
  const TlsFiles client = ClientTls(c->processes().credentials_dir());
  EXPECT_EQ(List(*Jobs(*c, Tls(client), "")).code(), kUnauthenticated);
  EXPECT_EQ(List(*Jobs(*c, Tls(client), "0123456789abcdef0123456789abcdef")).code(),
            kUnauthenticated);
  // Plaintext reaches no handler at all.
  EXPECT_FALSE(List(*Jobs(*c, Transport::Plaintext(), "")).ok());
  EXPECT_OK(List(*Jobs(*c, Tls(client), Token(*c, "alice"))));
}

TEST(Security, UsersSeeAndTouchOnlyTheirOwnJobsAndAdminsEverything) {
  auto c = Start(false);
  ASSERT_NE(c, nullptr);
  const Transport tls = Tls(ClientTls(c->processes().credentials_dir()));
  auto alice = Jobs(*c, tls, Token(*c, "alice"));
  auto bob = Jobs(*c, tls, Token(*c, "bob"));
  v1::Job job;
  {
    grpc::ClientContext ctx;
    ASSERT_OK(FromGrpcStatus(alice->SubmitJob(WithDeadline(&ctx), MlpSpec(1, 20), &job)));
  }
  EXPECT_EQ(job.owner(), "alice");
  EXPECT_TRUE(IsJobId(job.id())) << job.id();
  EXPECT_THAT(job.id(), ::testing::MatchesRegex("job-[0-9]+-[0-9a-f]{8}"));

  v1::ListJobsResponse seen;
  ASSERT_OK(List(*bob, &seen));
  EXPECT_EQ(seen.jobs_size(), 0) << "bob lists alice's job (and its spec)";
  ASSERT_OK(List(*alice, &seen));
  EXPECT_EQ(seen.jobs_size(), 1);
  ASSERT_OK(List(c->jobs(), &seen));  // the admin
  EXPECT_EQ(seen.jobs_size(), 1);

  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_id(job.id());
    v1::Job out;
    EXPECT_EQ(FromGrpcStatus(bob->GetJob(WithDeadline(&ctx), req, &out)).code(), kDenied);
  }
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_id(job.id());
    v1::Job out;
    EXPECT_EQ(FromGrpcStatus(bob->CancelJob(WithDeadline(&ctx), req, &out)).code(), kDenied);
  }
  {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_id(job.id());
    auto reader = bob->WatchJob(WithDeadline(&ctx), req);
    v1::JobEvent e;
    EXPECT_FALSE(reader->Read(&e));
    EXPECT_EQ(FromGrpcStatus(reader->Finish()).code(), kDenied);
  }
  for (const bool follow : {false, true}) {  // her job's log lines
    grpc::ClientContext ctx;
    v1::WatchLogsRequest req;
    req.set_id(job.id());
    req.set_follow(follow);
    auto reader = bob->WatchLogs(WithDeadline(&ctx), req);
    v1::JobEvent e;
    EXPECT_FALSE(reader->Read(&e)) << "bob reads alice's log: " << e.DebugString();
    const absl::Status st = FromGrpcStatus(reader->Finish());
    EXPECT_EQ(st.code(), kDenied);
    EXPECT_THAT(st.message(), HasSubstr("another user"));
  }
  {  // while she reads them
    grpc::ClientContext ctx;
    v1::WatchLogsRequest req;
    req.set_id(job.id());
    auto reader = alice->WatchLogs(WithDeadline(&ctx), req);
    v1::JobEvent e;
    ASSERT_TRUE(reader->Read(&e));
    EXPECT_EQ(e.log().job(), job.id());
    ctx.TryCancel();
    while (reader->Read(&e)) {
    }
    (void)reader->Finish();
  }
  {
    grpc::ClientContext ctx;
    v1::ListWorkersResponse out;
    EXPECT_EQ(FromGrpcStatus(bob->ListWorkers(WithDeadline(&ctx), {}, &out)).code(), kDenied);
  }
  ASSERT_OK_AND_ASSIGN(v1::Job done, c->WaitFor(job.id(), absl::Minutes(2)));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << "bob's cancel went through: " << done.failure_reason();
  {
    grpc::ClientContext ctx;
    v1::GetCheckpointRequest req;
    req.set_id(job.id());
    auto reader = bob->GetCheckpoint(WithDeadline(&ctx), req);
    v1::CheckpointChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk)) << "bob downloaded alice's weights";
    EXPECT_EQ(FromGrpcStatus(reader->Finish()).code(), kDenied);
  }
  // nor can he start from her weights, however he names them
  for (const std::string& from : {job.id(), job.id() + "/checkpoint.safetensors",
                                  "./" + job.id() + "/checkpoint.safetensors"}) {
    v1::JobSpec spec = MlpSpec(1, 30);
    spec.set_resume_from(from);
    grpc::ClientContext ctx;
    v1::Job out;
    const absl::Status st = FromGrpcStatus(bob->SubmitJob(WithDeadline(&ctx), spec, &out));
    EXPECT_EQ(st.code(), kDenied) << from;
    EXPECT_THAT(st.message(), HasSubstr("resume_from")) << from;
  }
  {  // and his request id is his own
    v1::JobSpec spec = MlpSpec(1, 5);
    spec.set_request_id("same");
    v1::Job a, b;
    grpc::ClientContext ca, cb;
    ASSERT_OK(FromGrpcStatus(alice->SubmitJob(WithDeadline(&ca), spec, &a)));
    ASSERT_OK(FromGrpcStatus(bob->SubmitJob(WithDeadline(&cb), spec, &b)));
    EXPECT_NE(a.id(), b.id());
    EXPECT_EQ(b.owner(), "bob");
  }
}

TEST(Security, ClusterCertificatesAndTokensOpenOnlyTheirOwnDoors) {
  auto c = Start(false);
  ASSERT_NE(c, nullptr);
  const std::string dir = c->processes().credentials_dir();
  const std::string admin = Token(*c, "admin");
  // A client credential cannot register a worker or touch the rendezvous...
  EXPECT_EQ(Register(*c, Tls(ClientTls(dir)), admin, "127.0.0.1:9").code(), kUnauthenticated);
  EXPECT_EQ(SetKey(*c, Tls(ClientTls(dir)), "jobs/x").code(), kUnauthenticated);
  // ...and a worker's certificate cannot use the job API, even with a token.
  EXPECT_EQ(List(*Jobs(*c, Tls(WorkerTls(dir, "worker-0")), admin)).code(), kDenied);
  // A certificate from another CA does not even get a connection.
  const std::string other = dir + "-other";
  ASSERT_OK(MakeCredentials({other, {}, {}, {"worker-9"}}));
  EXPECT_FALSE(Register(*c, Tls(WorkerTls(other, "worker-9")), "", "127.0.0.1:9").ok());
  ASSERT_OK_AND_ASSIGN(v1::ListWorkersResponse workers, c->Workers());
  EXPECT_EQ(workers.workers_size(), 1) << "a rogue worker registered";
}

TEST(Security, PrewrittenRendezvousKeysCannotReachAJob) {
  auto c = Start(false);
  ASSERT_NE(c, nullptr);
  const Transport worker = WorkerCert(*c, "rogue");
  // A holder of a worker certificate pre-writes keys under every name the next job could
  // use without the secret part (the attack that made jobs fail): refused, as no job's
  // namespace holds them.
  for (int n = 1; n <= 3; ++n) {
    for (const char* key : {"/0/", "/1/"}) {
      EXPECT_EQ(SetKey(*c, worker, absl::StrFormat("jobs/job-%06d%s0", n, key)).code(), kDenied);
    }
  }
  ASSERT_OK_AND_ASSIGN(v1::Job job, c->Submit(MlpSpec(1, 5)));
  ASSERT_OK_AND_ASSIGN(v1::Job done, c->WaitFor(job.id(), absl::Minutes(2)));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
}

// The TCP ports process `pid` listens on (its sockets in LISTEN state).
std::vector<int> ListeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& fd :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec)) {
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (absl::StartsWith(target, "socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<int> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() > 9 && f[3] == "0A" && inodes.count(f[9])) {
        ports.push_back(std::stoi(f[1].substr(f[1].rfind(':') + 1), nullptr, 16));
      }
    }
  }
  return ports;
}

// Connects to 127.0.0.1:port, writes `bytes`, reads what comes for a moment, and closes.
void Send(int port, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv = {0, 200000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    char buf[4096];
    (void)!recv(fd, buf, sizeof(buf), 0);
  }
  close(fd);
}

// Garbage, HTTP/1, a bad HTTP/2 stream and a bogus TLS record on every port of every
// server, mid-job: nothing crashes, and the job ends as an undisturbed one would.
TEST(Security, GarbageOnEveryPortAndSigpipeAreHarmless) {
  ClusterOptions options;
  options.workers = 2;
  auto c = LocalCluster::Start(std::move(options));
  ASSERT_OK(c.status());
  LocalCluster& cluster = **c;
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster.Submit(MlpSpec(2, 400)));
  ASSERT_OK(cluster.WaitForStep(job.id(), 20, absl::Minutes(1)).status());
  std::string random(4096, '\0');
  for (size_t i = 0; i < random.size(); ++i) random[i] = static_cast<char>((i * 2654435761u) >> 13);
  const std::string payloads[] = {
      random,
      "GET / HTTP/1.1\r\nHost: lockstep\r\nConnection: close\r\n\r\n",
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + std::string("\x00\xff\xff\x01\x05\x7f\xff\xff\xff", 9) +
          random.substr(0, 512),
      std::string("\x16\x03\x01\xff\xff", 5) + random.substr(0, 1024),
      std::string(100000, 'A'),
      "",
  };
  const std::vector<pid_t> pids = cluster.processes().pids();
  int ports = 0;
  for (pid_t pid : pids) {
    for (int port : ListeningPorts(pid)) {
      ++ports;
      for (const std::string& p : payloads) Send(port, p);
    }
  }
  // The coordinator's and each worker's gRPC port; a Gloo listener is open only while a
  // job's ranks connect, and hit here if it still is.
  EXPECT_GE(ports, 3);
  // A write to a peer that went away raises SIGPIPE: every server ignores it (a worker
  // resumed after a long stall used to die of it, silently).
  for (pid_t pid : pids) ASSERT_EQ(kill(pid, SIGPIPE), 0);
  ASSERT_OK_AND_ASSIGN(v1::Job done, cluster.WaitFor(job.id(), absl::Minutes(3)));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << cluster.Logs();
  for (pid_t pid : pids) EXPECT_EQ(kill(pid, 0), 0) << "process " << pid << " died";
  EXPECT_EQ(done.recoveries(), 0) << cluster.Logs();
}

// The same attacks against an --insecure cluster go through: what the tests above refuse
// is what TLS and tokens stop.
TEST(Security, AnInsecureClusterLetsTheAttacksThrough) {
  auto c = Start(true);
  ASSERT_NE(c, nullptr);
  EXPECT_OK(List(*Jobs(*c, Transport::Plaintext(), "")));
  EXPECT_OK(Register(*c, Transport::Plaintext(), "", "127.0.0.1:9"));
  // Without identities, anyone heartbeats for a worker and takes its address (the
  // rendezvous' namespaces and budgets hold even here: a key outside a job's is refused).
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo victim, WorkerNamed(*c, "worker-0"));
  EXPECT_OK(Heartbeat(*c, Transport::Plaintext(), victim.id()));
  EXPECT_OK(Register(*c, Transport::Plaintext(), "", victim.address()));
  EXPECT_EQ(SetKey(*c, Transport::Plaintext(), "jobs/x").code(), kDenied);
}

// A server refuses to start in plaintext unless asked, and on a reachable address unless
// asked twice; with TLS, the coordinator needs its tokens.
TEST(Security, ServersRefuseInsecureStartsTheyWereNotAskedFor) {
  auto exit_code = [](std::vector<std::string> argv) {
    const std::string log = ::testing::TempDir() + "/refused-start.log";
    auto pid = SpawnServer(argv, log);
    EXPECT_TRUE(pid.ok());
    int status = 0;
    const absl::Time end = absl::Now() + absl::Seconds(10);
    while (waitpid(*pid, &status, WNOHANG) == 0) {
      if (absl::Now() > end) {
        kill(*pid, SIGKILL);
        waitpid(*pid, &status, 0);
        return std::pair(-1, ReadAll(log));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return std::pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadAll(log));
  };
  const std::string coordinator = BinaryPath("lockstep-coordinator");
  const std::string state = "--state_dir=" + ::testing::TempDir() + "/refused-state";
  auto [code, log] = exit_code({coordinator, "--listen=127.0.0.1:0", state});
  EXPECT_EQ(code, 2);
  EXPECT_THAT(log, HasSubstr("TLS is required"));
  std::tie(code, log) = exit_code({coordinator, "--insecure", "--listen=0.0.0.0:0", state});
  EXPECT_EQ(code, 2);
  EXPECT_THAT(log, HasSubstr("--allow_insecure_remote"));
  std::tie(code, log) = exit_code({BinaryPath("lockstep-worker"), "--insecure",
                                   "--coordinator=10.0.0.1:7070", "--listen=127.0.0.1:0"});
  EXPECT_EQ(code, 2);
  EXPECT_THAT(log, HasSubstr("10.0.0.1:7070"));
  const std::string creds = ::testing::TempDir() + "/refused-credentials";
  ASSERT_OK(MakeCredentials({creds, {}, {}}));
  const TlsFiles tls = CoordinatorTls(creds);
  std::tie(code, log) = exit_code({coordinator, "--listen=127.0.0.1:0", state, "--tls_ca=" + tls.ca,
                                   "--tls_cert=" + tls.cert, "--tls_key=" + tls.key});
  EXPECT_EQ(code, 2);
  EXPECT_THAT(log, HasSubstr("--tokens_file"));
}

}  // namespace
}  // namespace lockstep::testing
