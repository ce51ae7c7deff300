// Per-worker identities against a real cluster: the shared worker certificate of old
// registers nothing, a worker acts only as itself, a revoked worker is refused for good,
// enrollment with a bootstrap token, and a SIGTERM while enrolling.
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

}  // namespace
}  // namespace lockstep::testing
