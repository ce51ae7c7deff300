// The attacks of issue 10, each against a real cluster (`lockstep cluster up`'s
// processes, TLS and tokens by default): every one is refused with UNAUTHENTICATED or
// PERMISSION_DENIED. The same attacks against an --insecure cluster succeed, so that these
// tests can fail. (Calls on a worker's own service are in services/worker/service_test.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/cluster/cluster_processes.h"
#include "core/testing.h"
#include "lockstep/v1/registry.grpc.pb.h"
#include "services/common/credentials.h"
#include "services/common/job_state.h"
#include "services/common/net.h"
#include "services/common/status.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::StatusCode kUnauthenticated = absl::StatusCode::kUnauthenticated;
constexpr absl::StatusCode kDenied = absl::StatusCode::kPermissionDenied;

std::unique_ptr<LocalCluster> Start(bool insecure) {
  ClusterOptions options;
  options.workers = 1;
  options.insecure = insecure;
  options.users = {"alice", "bob"};
  auto c = LocalCluster::Start(std::move(options));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

std::string Token(const LocalCluster& c, const std::string& user) {
  std::ifstream in(TokenFile(c.processes().credentials_dir(), user));
  std::string token;
  in >> token;
  return token;
}

Transport Tls(const TlsFiles& files) {
  absl::StatusOr<Transport> t = Transport::Tls(files);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Transport::Plaintext();
}

// The job API as someone holding `transport`'s certificate (if any) and `token`.
std::unique_ptr<v1::JobService::Stub> Jobs(const LocalCluster& c, const Transport& transport,
                                           const std::string& token) {
  return v1::JobService::NewStub(MakeChannel(c.address(), transport, kCoordinatorIdentity, token));
}

grpc::ClientContext* WithDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  return ctx;
}

absl::Status List(v1::JobService::Stub& stub, v1::ListJobsResponse* resp = nullptr) {
  grpc::ClientContext ctx;
  v1::ListJobsResponse r;
  return FromGrpcStatus(stub.ListJobs(WithDeadline(&ctx), v1::ListJobsRequest(), resp ? resp : &r));
}

absl::Status Register(const LocalCluster& c, const Transport& transport, const std::string& token,
                      const std::string& address) {
  auto stub =
      v1::WorkerRegistry::NewStub(MakeChannel(c.address(), transport, kCoordinatorIdentity, token));
  grpc::ClientContext ctx;
  v1::RegisterRequest req;
  req.set_address(address);
  req.set_device("cpu");
  req.set_name("rogue");
  v1::RegisterResponse resp;
  return FromGrpcStatus(stub->Register(WithDeadline(&ctx), req, &resp));
}

absl::Status SetKey(const LocalCluster& c, const Transport& transport, const std::string& key) {
  auto stub = v1::Rendezvous::NewStub(MakeChannel(c.address(), transport, kCoordinatorIdentity));
  grpc::ClientContext ctx;
  v1::SetRequest req;
  req.set_key(key);
  req.set_value("attacker:1");
  v1::SetResponse resp;
  return FromGrpcStatus(stub->Set(WithDeadline(&ctx), req, &resp));
}

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
  {  // nor can he start from her weights
    v1::JobSpec spec = MlpSpec(1, 30);
    spec.set_resume_from(job.id());
    grpc::ClientContext ctx;
    v1::Job out;
    const absl::Status st = FromGrpcStatus(bob->SubmitJob(WithDeadline(&ctx), spec, &out));
    EXPECT_EQ(st.code(), kDenied);
    EXPECT_THAT(st.message(), HasSubstr("resume_from"));
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
  EXPECT_EQ(List(*Jobs(*c, Tls(WorkerTls(dir)), admin)).code(), kDenied);
  // A certificate from another CA does not even get a connection.
  const std::string other = dir + "-other";
  ASSERT_OK(MakeCredentials({other, {}, {}}));
  EXPECT_FALSE(Register(*c, Tls(WorkerTls(other)), "", "127.0.0.1:9").ok());
  ASSERT_OK_AND_ASSIGN(v1::ListWorkersResponse workers, c->Workers());
  EXPECT_EQ(workers.workers_size(), 1) << "a rogue worker registered";
}

TEST(Security, PrewrittenRendezvousKeysCannotReachAJob) {
  auto c = Start(false);
  ASSERT_NE(c, nullptr);
  const Transport worker = Tls(WorkerTls(c->processes().credentials_dir()));
  // A holder of a worker certificate pre-writes keys under every name the next job could
  // use without the secret part (the attack that made jobs fail).
  for (int n = 1; n <= 3; ++n) {
    for (const char* key : {"/0/", "/1/"}) {
      EXPECT_OK(SetKey(*c, worker, absl::StrFormat("jobs/job-%06d%s0", n, key)));
    }
  }
  ASSERT_OK_AND_ASSIGN(v1::Job job, c->Submit(MlpSpec(1, 5)));
  ASSERT_OK_AND_ASSIGN(v1::Job done, c->WaitFor(job.id(), absl::Minutes(2)));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
}

// The same attacks against an --insecure cluster go through: what the tests above refuse
// is what TLS and tokens stop.
TEST(Security, AnInsecureClusterLetsTheAttacksThrough) {
  auto c = Start(true);
  ASSERT_NE(c, nullptr);
  EXPECT_OK(List(*Jobs(*c, Transport::Plaintext(), "")));
  EXPECT_OK(Register(*c, Transport::Plaintext(), "", "127.0.0.1:9"));
  EXPECT_OK(SetKey(*c, Transport::Plaintext(), "jobs/x"));
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
