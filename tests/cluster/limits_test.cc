// Per-user limits through the gRPC job API of a real cluster (`lockstep cluster up`'s
// processes, TLS and tokens): one user's burst is refused naming their limit while another
// user submits; retention is per owner across a coordinator restart; and a limit of one's
// own in the tokens file applies after a restart (issue 22, item 2).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/testing.h"
#include "services/common/rpc/status.h"
#include "services/common/security/credentials.h"
#include "tests/cluster/local_cluster.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

grpc::ClientContext* WithDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  return ctx;
}

absl::StatusOr<v1::Job> Submit(v1::JobService::Stub& stub, const v1::JobSpec& spec) {
  grpc::ClientContext ctx;
  v1::Job job;
  RETURN_IF_ERROR(FromGrpcStatus(stub.SubmitJob(WithDeadline(&ctx), spec, &job)));
  return job;
}

absl::StatusOr<v1::Job> Get(v1::JobService::Stub& stub, const std::string& id) {
  grpc::ClientContext ctx;
  v1::GetJobRequest req;
  req.set_id(id);
  v1::Job job;
  RETURN_IF_ERROR(FromGrpcStatus(stub.GetJob(WithDeadline(&ctx), req, &job)));
  return job;
}

absl::Status Cancel(v1::JobService::Stub& stub, const std::string& id) {
  grpc::ClientContext ctx;
  v1::CancelJobRequest req;
  req.set_id(id);
  v1::Job job;
  return FromGrpcStatus(stub.CancelJob(WithDeadline(&ctx), req, &job));
}

absl::StatusOr<int> ListCount(v1::JobService::Stub& stub) {
  grpc::ClientContext ctx;
  v1::ListJobsResponse resp;
  RETURN_IF_ERROR(FromGrpcStatus(stub.ListJobs(WithDeadline(&ctx), v1::ListJobsRequest(), &resp)));
  return resp.jobs_size();
}

// The first chunk of the job's checkpoint, as `stub`'s caller.
absl::Status ReadCheckpoint(v1::JobService::Stub& stub, const std::string& id) {
  grpc::ClientContext ctx;
  v1::GetCheckpointRequest req;
  req.set_id(id);
  auto reader = stub.GetCheckpoint(WithDeadline(&ctx), req);
  v1::CheckpointChunk chunk;
  const bool got = reader->Read(&chunk);
  ctx.TryCancel();
  const absl::Status st = FromGrpcStatus(reader->Finish());
  if (got) return absl::OkStatus();
  return st.ok() ? absl::DataLossError("an empty checkpoint") : st;
}

TEST(Limits, OneUsersBurstIsRefusedNamingTheLimitAndAnothersJobStaysAcrossARestart) {
  ClusterOptions options;
  options.workers = 1;
  options.users = {"alice", "bob"};
  options.coordinator_flags = {"--max_queued_jobs_per_user=3", "--max_jobs_kept_per_user=2"};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> c, LocalCluster::Start(std::move(options)));
  const ClusterProcesses& p = c->processes();
  auto alice = v1::JobService::NewStub(p.Channel("alice"));
  auto bob = v1::JobService::NewStub(p.Channel("bob"));

  ASSERT_OK_AND_ASSIGN(v1::Job old, Submit(*bob, MlpSpec(1, 5)));
  ASSERT_OK_AND_ASSIGN(v1::Job done, c->WaitFor(old.id(), absl::Seconds(120)));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << c->Logs();

  // Jobs for 2 workers on a 1-worker cluster stay queued: her 4th is refused, his is not.
  std::vector<std::string> hers;
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(v1::Job job, Submit(*alice, MlpSpec(2, 5)));
    hers.push_back(job.id());
  }
  EXPECT_THAT(
      Submit(*alice, MlpSpec(2, 5)),
      StatusIs(absl::StatusCode::kResourceExhausted,
               HasSubstr("user alice: 3 queued jobs (limit --max_queued_jobs_per_user 3)")));
  ASSERT_OK_AND_ASSIGN(v1::Job his, Submit(*bob, MlpSpec(2, 5)));
  ASSERT_OK(Cancel(*bob, his.id()));
  for (const std::string& id : hers) ASSERT_OK(Cancel(*alice, id));
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(v1::Job job, Submit(*alice, MlpSpec(2, 5)));
    ASSERT_OK(Cancel(*alice, job.id()));
  }

  // Her own limit in the tokens file, read by the restarted coordinator (a kill -9).
  const std::string tokens = TokensFile(p.credentials_dir());
  std::ifstream in(tokens);
  std::stringstream text;
  text << in.rdbuf();
  in.close();
  std::ofstream(tokens) << absl::StrReplaceAll(text.str(), {{" alice user",
                                                             " alice user "
                                                             "max_queued_jobs=1"}});
  ASSERT_OK(c->RestartCoordinator());
  alice = v1::JobService::NewStub(c->processes().Channel("alice"));
  bob = v1::JobService::NewStub(c->processes().Channel("bob"));
  ASSERT_OK_AND_ASSIGN(v1::Job got, Get(*bob, old.id()));
  EXPECT_EQ(got.state(), v1::SUCCEEDED);
  EXPECT_OK(ReadCheckpoint(*bob, old.id()));
  ASSERT_OK_AND_ASSIGN(const int alice_kept, ListCount(*alice));
  EXPECT_EQ(alice_kept, 2);  // her 2 newest finished jobs
  ASSERT_OK_AND_ASSIGN(const int bob_kept, ListCount(*bob));
  EXPECT_EQ(bob_kept, 2);  // both of his
  ASSERT_OK(Submit(*alice, MlpSpec(2, 5)).status());
  EXPECT_THAT(Submit(*alice, MlpSpec(2, 5)),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("user alice: 1 queued jobs (limit max_queued_jobs=1 in the "
                                 "tokens file)")));
  v1::JobSpec resume = MlpSpec(1, 5);
  resume.set_resume_from(old.id());
  EXPECT_OK(Submit(*bob, resume).status());
}

}  // namespace
}  // namespace lockstep::testing
