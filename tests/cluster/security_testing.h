// What the security tests share (security_test.cc, worker_identity_test.cc): a real
// cluster's start, its credentials, and calls made as someone holding them.
#ifndef LOCKSTEP_TESTS_CLUSTER_SECURITY_TESTING_H_
#define LOCKSTEP_TESTS_CLUSTER_SECURITY_TESTING_H_

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

namespace lockstep::testing {

constexpr absl::StatusCode kUnauthenticated = absl::StatusCode::kUnauthenticated;
constexpr absl::StatusCode kDenied = absl::StatusCode::kPermissionDenied;

inline std::unique_ptr<LocalCluster> Start(bool insecure, int workers = 1) {
  ClusterOptions options;
  options.workers = workers;
  options.insecure = insecure;
  options.users = {"alice", "bob"};
  auto c = LocalCluster::Start(std::move(options));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

inline std::string Token(const LocalCluster& c, const std::string& user) {
  std::ifstream in(TokenFile(c.processes().credentials_dir(), user));
  std::string token;
  in >> token;
  return token;
}

inline Transport Tls(const TlsFiles& files) {
  absl::StatusOr<Transport> t = Transport::Tls(files);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Transport::Plaintext();
}

// The job API as someone holding `transport`'s certificate (if any) and `token`.
inline std::unique_ptr<v1::JobService::Stub> Jobs(const LocalCluster& c, const Transport& transport,
                                                  const std::string& token) {
  return v1::JobService::NewStub(MakeChannel(c.address(), transport, kCoordinatorIdentity, token));
}

inline grpc::ClientContext* WithDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  return ctx;
}

inline absl::Status List(v1::JobService::Stub& stub, v1::ListJobsResponse* resp = nullptr) {
  grpc::ClientContext ctx;
  v1::ListJobsResponse r;
  return FromGrpcStatus(stub.ListJobs(WithDeadline(&ctx), v1::ListJobsRequest(), resp ? resp : &r));
}

inline absl::Status Register(const LocalCluster& c, const Transport& transport,
                             const std::string& token, const std::string& address) {
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
inline Transport WorkerCert(const LocalCluster& c, const std::string& name) {
  const std::string dir = c.processes().credentials_dir();
  EXPECT_OK(MakeCredentials({dir, {}, {}, {name}}));
  return Tls(WorkerTls(dir, name));
}

// The shared worker certificate of clusters made before per-worker identities: CN and DNS
// lockstep-worker, from this cluster's CA (made here with openssl, as an old `lockstep
// certs` made it).
inline Transport SharedWorkerCert(const LocalCluster& c) {
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

inline absl::Status Heartbeat(const LocalCluster& c, const Transport& transport,
                              const std::string& id, const std::string& job_id = "") {
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

inline absl::StatusOr<std::string> Revoke(const LocalCluster& c, const std::string& token,
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

inline absl::StatusOr<v1::WorkerInfo> WorkerNamed(LocalCluster& c, const std::string& name) {
  ASSIGN_OR_RETURN(v1::ListWorkersResponse workers, c.Workers());
  for (const v1::WorkerInfo& w : workers.workers()) {
    if (w.name() == name) return w;
  }
  return absl::NotFoundError(absl::StrCat("no worker ", name));
}

inline absl::Status SetKey(const LocalCluster& c, const Transport& transport,
                           const std::string& key) {
  auto stub = v1::Rendezvous::NewStub(MakeChannel(c.address(), transport, kCoordinatorIdentity));
  grpc::ClientContext ctx;
  v1::SetRequest req;
  req.set_key(key);
  req.set_value("attacker:1");
  v1::SetResponse resp;
  return FromGrpcStatus(stub->Set(WithDeadline(&ctx), req, &resp));
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_TESTS_CLUSTER_SECURITY_TESTING_H_
