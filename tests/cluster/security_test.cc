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

std::unique_ptr<LocalCluster> Start(bool insecure, int workers = 1) {
  ClusterOptions options;
  options.workers = workers;
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

// A worker certificate of this cluster's CA for `name` (a compromised or rogue machine's
// own identity).
Transport WorkerCert(const LocalCluster& c, const std::string& name) {
  const std::string dir = c.processes().credentials_dir();
  EXPECT_OK(MakeCredentials({dir, {}, {}, {name}}));
  return Tls(WorkerTls(dir, name));
}

// The shared worker certificate of clusters made before per-worker identities: CN and DNS
// lockstep-worker, from this cluster's CA (made here with openssl, as an old `lockstep
// certs` made it).
Transport SharedWorkerCert(const LocalCluster& c) {
  const std::string dir = c.processes().credentials_dir();
  const std::string cmd = absl::StrCat(
      "cd ", dir, " && openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes ",
      "-keyout shared-key.pem -subj /O=Lockstep/CN=lockstep-worker -out shared.csr 2>/dev/null ",
      "&& printf 'subjectAltName=DNS:lockstep-worker\nextendedKeyUsage=serverAuth,clientAuth\n' ",
      "> shared.ext && openssl x509 -req -in shared.csr -CA ca.pem -CAkey ca-key.pem ",
      "-CAcreateserial -days 1 -extfile shared.ext -out shared.pem 2>/dev/null");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return Tls({dir + "/ca.pem", dir + "/shared.pem", dir + "/shared-key.pem"});
}

absl::Status Heartbeat(const LocalCluster& c, const Transport& transport, const std::string& id,
                       const std::string& job_id = "") {
  auto stub =
      v1::WorkerRegistry::NewStub(MakeChannel(c.address(), transport, kCoordinatorIdentity));
  grpc::ClientContext ctx;
  v1::HeartbeatRequest req;
  req.set_worker_id(id);
  if (!job_id.empty()) {
    v1::LogLine* line = req.add_logs();
    line->set_job(job_id);
    line->set_message("forged line");
  }
  v1::HeartbeatResponse resp;
  return FromGrpcStatus(stub->Heartbeat(WithDeadline(&ctx), req, &resp));
}

absl::StatusOr<std::string> Revoke(const LocalCluster& c, const std::string& token,
                                   const std::string& id) {
  auto stub = v1::WorkerAdmin::NewStub(MakeChannel(
      c.address(), Tls(ClientTls(c.processes().credentials_dir())), kCoordinatorIdentity, token));
  grpc::ClientContext ctx;
  v1::RevokeWorkerRequest req;
  req.set_id(id);
  v1::RevokeWorkerResponse resp;
  if (absl::Status st = FromGrpcStatus(stub->RevokeWorker(WithDeadline(&ctx), req, &resp));
      !st.ok()) {
    return st;
  }
  return resp.identity();
}

absl::StatusOr<v1::WorkerInfo> WorkerNamed(LocalCluster& c, const std::string& name) {
  ASSIGN_OR_RETURN(v1::ListWorkersResponse workers, c.Workers());
  for (const v1::WorkerInfo& w : workers.workers()) {
    if (w.name() == name) return w;
  }
  return absl::NotFoundError(absl::StrCat("no worker ", name));
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

TEST(Security, TheSharedWorkerCertificateRegistersNothingAndFillsNoStore) {
  auto c = Start(false, 2);
  ASSERT_NE(c, nullptr);
  const Transport shared = SharedWorkerCert(*c);
  EXPECT_THAT(Register(*c, shared, "", "127.0.0.1:9"),
              StatusIs(kDenied, HasSubstr("names no worker")));
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo w0, WorkerNamed(*c, "worker-0"));
  EXPECT_EQ(Heartbeat(*c, shared, w0.id()).code(), kDenied);
  // The store was filled to its 64 MiB cap with it: now nothing lands, and a 2-worker job
  // bootstraps and succeeds afterwards.
  const Transport rogue = WorkerCert(*c, "rogue");
  for (const Transport* t : {&shared, &rogue}) {
    auto stub = v1::Rendezvous::NewStub(MakeChannel(c->address(), *t, kCoordinatorIdentity));
    for (int i = 0; i < 4; ++i) {
      grpc::ClientContext ctx;
      v1::SetRequest req;
      req.set_key(absl::StrCat("fill/", i));
      req.set_value(std::string(1 << 20, 'x'));
      v1::SetResponse resp;
      EXPECT_EQ(FromGrpcStatus(stub->Set(WithDeadline(&ctx), req, &resp)).code(), kDenied);
    }
  }
  ASSERT_OK_AND_ASSIGN(v1::Job job, c->Submit(MlpSpec(2, 5)));
  ASSERT_OK_AND_ASSIGN(v1::Job done, c->WaitFor(job.id(), absl::Minutes(2)));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
}

TEST(Security, AWorkerActsOnlyAsItselfNoHeartbeatsLogsOrAddressesOfAnother) {
  auto c = Start(false, 1);
  ASSERT_NE(c, nullptr);
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo victim, WorkerNamed(*c, "worker-0"));
  // A job runs on the victim, so that forged log lines would have a log to land in.
  ASSERT_OK_AND_ASSIGN(v1::Job job, c->Submit(MlpSpec(1, 100000)));
  ASSERT_OK(c->WaitForStep(job.id(), 1, absl::Minutes(2)));
  const Transport rogue = WorkerCert(*c, "rogue");
  EXPECT_THAT(Heartbeat(*c, rogue, victim.id(), job.id()),
              StatusIs(kDenied, HasSubstr("another identity")));
  // Registering with the victim's address does not evict it.
  EXPECT_THAT(Register(*c, rogue, "", victim.address()),
              StatusIs(kDenied, HasSubstr(victim.address())));
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo still, WorkerNamed(*c, "worker-0"));
  EXPECT_EQ(still.id(), victim.id());
  EXPECT_EQ(still.job_id(), job.id());
  (void)c->Cancel(job.id());
  ASSERT_OK_AND_ASSIGN(v1::Job ended, c->WaitFor(job.id(), absl::Minutes(2)));
  EXPECT_EQ(ended.recoveries(), 0) << ended.failure_reason();
  // The job's log holds no forged line.
  auto stub = Jobs(*c, Tls(ClientTls(c->processes().credentials_dir())), Token(*c, "admin"));
  grpc::ClientContext ctx;
  v1::WatchLogsRequest req;
  req.set_id(job.id());
  auto reader = stub->WatchLogs(WithDeadline(&ctx), req);
  v1::JobEvent ev;
  while (reader->Read(&ev)) EXPECT_NE(ev.log().message(), "forged line");
  EXPECT_OK(FromGrpcStatus(reader->Finish()));
}

TEST(Security, ARevokedWorkerIsRefusedForGoodAndItsJobRecoversElsewhere) {
  auto c = Start(false, 3);
  ASSERT_NE(c, nullptr);
  ASSERT_OK_AND_ASSIGN(v1::Job job, c->Submit(MlpSpec(2, 300)));
  ASSERT_OK(c->WaitForStep(job.id(), 5, absl::Minutes(2)));
  ASSERT_OK_AND_ASSIGN(int index, c->WorkerOf(job.id()));
  const std::string name = absl::StrCat("worker-", index);
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo victim, WorkerNamed(*c, name));
  // Only an admin revokes.
  EXPECT_THAT(Revoke(*c, Token(*c, "alice"), victim.id()), StatusIs(kDenied, HasSubstr("admin")));
  ASSERT_OK_AND_ASSIGN(std::string identity, Revoke(*c, Token(*c, "admin"), victim.id()));
  EXPECT_EQ(identity, name);
  ASSERT_OK_AND_ASSIGN(v1::Job done, c->WaitFor(job.id(), absl::Minutes(5)));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << "\n" << c->Logs();
  EXPECT_GE(done.recoveries(), 1);
  EXPECT_EQ(WorkerNamed(*c, name).status().code(), absl::StatusCode::kNotFound);
  // Its process keeps trying to register, in vain; also after a coordinator restart.
  const Transport stolen = Tls(WorkerTls(c->processes().credentials_dir(), name));
  EXPECT_THAT(Register(*c, stolen, "", "127.0.0.1:9"), StatusIs(kDenied, HasSubstr("revoked")));
  ASSERT_OK(c->RestartCoordinator());
  EXPECT_THAT(Register(*c, stolen, "", "127.0.0.1:9"), StatusIs(kDenied, HasSubstr("revoked")));
  EXPECT_EQ(WorkerNamed(*c, name).status().code(), absl::StatusCode::kNotFound);
}

TEST(Security, AWorkerWithTheBootstrapTokenEnrollsForItsOwnIdentityAndOneWithoutDoesNot) {
  auto c = Start(false, 1);
  ASSERT_NE(c, nullptr);
  const std::string dir = c->processes().credentials_dir();
  auto worker = [&](const std::string& name, const std::string& token_file) {
    return SpawnServer(
        {BinaryPath("lockstep-worker"), "--coordinator=" + c->address(), "--listen=127.0.0.1:0",
         "--advertise_host=127.0.0.1", "--threads=1", "--name=" + name,
         "--tls_ca=" + dir + "/ca.pem", "--bootstrap_token_file=" + token_file,
         "--identity_dir=" + c->dir() + "/identity-" + name},
        c->dir() + "/logs/" + name + ".log");
  };
  const std::string wrong = c->dir() + "/wrong-token";
  std::ofstream(wrong) << "not-the-bootstrap-token-0123456789\n";
  ASSERT_OK_AND_ASSIGN(pid_t refused, worker("refused", wrong));
  int status = 0;
  ASSERT_EQ(waitpid(refused, &status, 0), refused);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  // A 2-worker job waits (queued) for the second worker: the one that enrolls.
  ASSERT_OK_AND_ASSIGN(v1::Job job, c->Submit(MlpSpec(2, 5)));
  ASSERT_OK_AND_ASSIGN(pid_t enrolled, worker("enrolled", BootstrapTokenFile(dir)));
  ASSERT_OK_AND_ASSIGN(v1::Job done, c->WaitFor(job.id(), absl::Minutes(2)));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << "\n" << c->Logs();
  ASSERT_OK_AND_ASSIGN(v1::WorkerInfo info, WorkerNamed(*c, "enrolled"));
  // Its key stayed where it was made.
  EXPECT_TRUE(std::filesystem::exists(c->dir() + "/identity-enrolled/worker-key.pem"));
  // Its identity is its name and a fresh random part.
  ASSERT_OK_AND_ASSIGN(std::string identity, Revoke(*c, Token(*c, "admin"), info.id()));
  EXPECT_THAT(identity, ::testing::StartsWith("enrolled-"));
  kill(enrolled, SIGKILL);
  waitpid(enrolled, nullptr, 0);
}

// Waits until `file` holds `text`, woken by inotify on its folder (bounded by `timeout`).
bool AwaitText(const std::string& file, const std::string& text, absl::Duration timeout) {
  const int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0) return false;
  const std::string folder = std::filesystem::path(file).parent_path().string();
  inotify_add_watch(fd, folder.c_str(), IN_MODIFY | IN_CREATE);
  const absl::Time end = absl::Now() + timeout;
  bool found;
  while (!(found = absl::StrContains(ReadAll(file), text)) && absl::Now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(end - absl::Now()))) > 0) {
      char events[4096];
      while (read(fd, events, sizeof(events)) > 0) {
      }
    }
  }
  close(fd);
  return found;
}

// Waits until child `pid` exits (a pidfd becomes readable), without reaping it.
bool AwaitExit(pid_t pid, absl::Duration timeout) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  const bool exited = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) > 0;
  close(fd);
  return exited;
}

// Enrolling waits up to two minutes for the coordinator; a SIGTERM (a pod deleted while its
// coordinator is away) ends the wait at once, and the worker exits 0.
TEST(Security, AWorkerWaitingToEnrollStopsAtSigterm) {
  const std::string dir = ::testing::TempDir() + "/enroll-sigterm";
  std::filesystem::remove_all(dir);  // the log is appended to
  ASSERT_OK(MakeCredentials({dir, {}, {}}));
  std::ofstream(dir + "/token") << "bootstrap-0123456789abcdef\n";
  const std::string log = dir + "/worker.log";
  ASSERT_OK_AND_ASSIGN(
      pid_t pid,
      SpawnServer({BinaryPath("lockstep-worker"), "--coordinator=127.0.0.1:1",
                   "--listen=127.0.0.1:0", "--advertise_host=127.0.0.1", "--threads=1",
                   "--name=waiting", "--tls_ca=" + dir + "/ca.pem",
                   "--bootstrap_token_file=" + dir + "/token", "--identity_dir=" + dir + "/id"},
                  log));
  // The worker's log says when its wait began (signals are blocked by then).
  ASSERT_TRUE(AwaitText(log, "enrolling with 127.0.0.1:1", absl::Seconds(30))) << ReadAll(log);
  kill(pid, SIGTERM);
  const bool reaped = AwaitExit(pid, absl::Seconds(10));
  if (!reaped) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(reaped) << "still enrolling 10 s after SIGTERM\n" << ReadAll(log);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << ReadAll(log);
  EXPECT_THAT(ReadAll(log), HasSubstr("stopped by a signal while enrolling"));
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
