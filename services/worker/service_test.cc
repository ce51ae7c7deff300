// The Worker service over a JobSlot, served in-process on loopback and driven by the
// coordinator's GrpcWorkerClient: a job's life over the wire, errors carried through the
// stream, the client's cancellation, health, a malformed Prepare stream, and callers other
// than the coordinator refused (mutual TLS with a real cluster CA).
#include "services/worker/service.h"

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/plan.h"
#include "core/spec/spec.h"
#include "core/spec/testing.h"
#include "core/testing.h"
#include "lockstep/v1/worker.grpc.pb.h"
#include "services/common/rpc/net.h"
#include "services/common/rpc/status.h"
#include "services/common/rpc/wire.h"
#include "services/common/security/credentials.h"
#include "services/coordinator/workers/worker_client.h"
#include "services/worker/testing.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

constexpr absl::Duration kTimeout = absl::Seconds(30);

// A cluster's credentials, made once for the test process in a folder of its own (one
// left behind by an earlier, interrupted process is never reused).
const std::string& CredentialsDir() {
  static const std::string* dir = [] {
    std::string templ = ::testing::TempDir() + "/worker-service-credentials.XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) std::abort();
    auto* d = new std::string(templ);
    std::atexit([] { std::filesystem::remove_all(*dir); });
    const absl::Status st = MakeCredentials({*d, {}, {}, {"worker-0"}});
    if (!st.ok()) std::abort();
    return d;
  }();
  return *dir;
}

Transport Tls(const TlsFiles& files) {
  absl::StatusOr<Transport> t = Transport::Tls(files);
  if (!t.ok()) std::abort();
  return *t;
}

class WorkerServiceTest : public ::testing::Test {
 protected:
  WorkerServiceTest()
      : slot_(backends_, cache_, nullptr),
        guard_(Guard::Tls(TokenTable())),
        service_(&slot_, &guard_, &rpc_),
        spec_(testing::SmallMlpSpec()) {}
  ~WorkerServiceTest() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    ConfigureServer(builder, "127.0.0.1:0", Tls(WorkerTls(CredentialsDir(), "worker-0")), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);
    client_ = NewGrpcWorkerClientFactory(Tls(CoordinatorTls(CredentialsDir())))->Connect(address_);

    // What JobRunner::Prepare sends: the seed program's params at step 0.
    auto setup = SetupFromSpec(spec_);
    ASSERT_TRUE(setup.ok()) << setup.status();
    impl_ = setup->impl;
    const std::vector<float> params =
        setup->model.Init(TrainingPlan::InitKey(spec_.seed(), impl_), impl_);
    const auto slots = static_cast<uint32_t>(setup->optimizer.slots().size());
    checksum_ = ParamChecksum(params);
    state_ = std::make_shared<SharedState>(
        SharedState{{0, params.size(), slots}, InitialStateBytes(params, slots)});
  }

  JobAssignment Job(const std::string& id) const {
    return {id, {spec_, 0, 1, kTimeout}, absl::StrCat("jobs/", id, "/")};
  }
  TrainingPlan Plan() const {
    return TrainingPlan(spec_.seed(), spec_.dropout_seed(), impl_, 60000,
                        static_cast<int>(spec_.global_batch_size()), 1);
  }

  DatasetCache* const cache_ = &testing::TestDatasets();  // shared by the process: loads once
  const BackendSource* const backends_ = &testing::TestBackends();
  const std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  RpcMetrics rpc_{*registry_};  // counts the Steps streams' statuses
  JobSlot slot_;
  const Guard guard_;
  WorkerServiceImpl service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::unique_ptr<WorkerClient> client_;
  const v1::JobSpec spec_;
  rng::Impl impl_ = {};
  uint64_t checksum_ = 0;
  std::shared_ptr<const SharedState> state_;
  CancelToken live_;  // never cancelled
};

TEST_F(WorkerServiceTest, RunsAJobOverTheWire) {
  ASSERT_OK_AND_ASSIGN(PrepareResult prepared, client_->Prepare(Job("a"), state_, live_, kTimeout));
  EXPECT_EQ(prepared.param_checksum, checksum_);
  EXPECT_EQ(prepared.train_examples, 60000);
  EXPECT_EQ(prepared.test_examples, 10000);

  ASSERT_OK_AND_ASSIGN(auto stream, client_->OpenSteps("a", live_, kTimeout));
  TrainingPlan plan = Plan();
  constexpr int kSteps = 20;          // past the worker's read-ahead of 16
  for (int s = 0; s < kSteps; ++s) {  // all sent before any answer is read
    const StepPlan p = plan.Next();
    ASSERT_TRUE(stream->Send(
        {.step = p.step, .key = p.keys[0], .indices = p.indices, .want_checksum = true}));
  }
  uint64_t last_checksum = 0;
  for (int s = 0; s < kSteps; ++s) {
    ASSERT_OK_AND_ASSIGN(StepResult r, stream->Receive(absl::Seconds(30)));
    EXPECT_EQ(r.step, s);
    EXPECT_TRUE(std::isfinite(r.loss)) << r.loss;
    last_checksum = r.param_checksum;
  }
  stream->CloseSend();
  EXPECT_THAT(stream->Receive(absl::Seconds(30)),
              StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));

  ASSERT_OK_AND_ASSIGN(EvalSums sums, client_->Evaluate("a", 1000, 2500, live_, kTimeout));
  EXPECT_EQ(sums.count, 1500);
  EXPECT_GT(sums.loss_sum, 0);
  ASSERT_OK_AND_ASSIGN(TrainState state, client_->FetchState("a", live_, kTimeout));
  EXPECT_EQ(state.step, kSteps);
  EXPECT_EQ(state.params.size(), state_->header.param_count);
  EXPECT_EQ(state.slots.size(), state_->header.slot_count);
  EXPECT_EQ(ParamChecksum(state.params), last_checksum);
  EXPECT_NE(last_checksum, checksum_);

  ASSERT_THAT(client_->Release("a", "test over", kTimeout), IsOk());
  EXPECT_THAT(client_->Evaluate("a", 0, 10, live_, kTimeout),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("job a is not prepared")));
  EXPECT_THAT(client_->FetchState("a", live_, kTimeout),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("job a is not prepared")));
}

TEST_F(WorkerServiceTest, AStepForAnotherJobEndsTheStream) {
  ASSERT_THAT(client_->Prepare(Job("a"), state_, live_, kTimeout), IsOk());
  ASSERT_OK_AND_ASSIGN(auto stream, client_->OpenSteps("b", live_, kTimeout));
  TrainingPlan plan = Plan();
  const StepPlan p = plan.Next();
  stream->Send({.step = 0, .key = p.keys[0], .indices = p.indices});
  EXPECT_THAT(stream->Receive(absl::Seconds(30)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("job b is not prepared on this worker")));
  // Counted by the stream itself (no interceptor on the per-step streams).
  EXPECT_EQ(ReadMetric(*registry_, "lockstep_rpc_errors_total",
                       {{"method", "lockstep.v1.Worker/Steps"}, {"code", "FAILED_PRECONDITION"}})
                .value_or(-1),
            1);
  // The job held is untouched.
  ASSERT_OK_AND_ASSIGN(EvalSums sums, client_->Evaluate("a", 0, 10, live_, kTimeout));
  EXPECT_EQ(sums.count, 10);
}

TEST_F(WorkerServiceTest, ACancelledTokenFailsCallsAtOnceWithItsStatus) {
  CancelToken cancel;
  const absl::Status why = absl::AbortedError("the job was stopped by the test");
  cancel.Cancel(why);
  EXPECT_EQ(client_->Prepare(Job("a"), state_, cancel, kTimeout).status(), why);
  EXPECT_EQ(client_->OpenSteps("a", cancel, kTimeout).status(), why);
  EXPECT_EQ(client_->Evaluate("a", 0, 10, cancel, kTimeout).status(), why);
  EXPECT_EQ(client_->FetchState("a", cancel, kTimeout).status(), why);
  // Nothing reached the worker.
  EXPECT_THAT(client_->Evaluate("a", 0, 10, live_, kTimeout),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("job a")));
}

TEST_F(WorkerServiceTest, CancellingTheTokenEndsAnOpenStream) {
  ASSERT_THAT(client_->Prepare(Job("a"), state_, live_, kTimeout), IsOk());
  CancelToken cancel;
  ASSERT_OK_AND_ASSIGN(auto stream, client_->OpenSteps("a", cancel, kTimeout));
  TrainingPlan plan = Plan();
  const StepPlan p = plan.Next();
  ASSERT_TRUE(stream->Send({.step = 0, .key = p.keys[0], .indices = p.indices}));
  ASSERT_OK_AND_ASSIGN(StepResult r, stream->Receive(absl::Seconds(30)));
  EXPECT_EQ(r.step, 0);
  // Receive now waits for an answer that will never come, unless the cancel ends it (the
  // cancel may land before or during the Receive: either must end it with the reason).
  // The reason, not DEADLINE_EXCEEDED: the cancel ended it, not its 30 s.
  const absl::Status why = absl::CancelledError("the coordinator gave up");
  std::thread canceller([&] { cancel.Cancel(why); });
  EXPECT_EQ(stream->Receive(absl::Seconds(30)).status(), why);
  canceller.join();
}

// An answer handed to a callback on gRPC's threads (WorkerClient::StartPrepare & co.).
template <typename T>
class Answer {
 public:
  std::function<void(T)> Done() {
    return [this](T got) {
      got_ = std::move(got);
      given_.Notify();
    };
  }
  // The answer; DEADLINE_EXCEEDED if none came (every call ends by its deadline).
  T Get() {
    if (!given_.WaitForNotificationWithTimeout(kTimeout + absl::Seconds(10))) {
      return absl::DeadlineExceededError("the callback was never called");
    }
    return got_;
  }

 private:
  absl::Notification given_;
  T got_ = absl::UnknownError("unset");
};

TEST_F(WorkerServiceTest, TheAsynchronousCallsAnswerAsTheBlockingOnes) {
  auto live = std::make_shared<CancelToken>();
  Answer<absl::StatusOr<PrepareResult>> prepared;
  ASSERT_TRUE(client_->StartPrepare(Job("a"), state_, live, kTimeout, prepared.Done()));
  ASSERT_OK_AND_ASSIGN(PrepareResult p, prepared.Get());
  EXPECT_EQ(p.param_checksum, checksum_);
  EXPECT_EQ(p.train_examples, 60000);
  EXPECT_EQ(p.test_examples, 10000);

  Answer<absl::StatusOr<EvalSums>> evaluated;
  ASSERT_TRUE(client_->StartEvaluate("a", 1000, 2500, live, kTimeout, evaluated.Done()));
  ASSERT_OK_AND_ASSIGN(EvalSums sums, evaluated.Get());
  ASSERT_OK_AND_ASSIGN(EvalSums blocking, client_->Evaluate("a", 1000, 2500, live_, kTimeout));
  EXPECT_EQ(sums.count, 1500);
  EXPECT_EQ(sums.loss_sum, blocking.loss_sum);
  EXPECT_EQ(sums.correct, blocking.correct);

  Answer<absl::Status> released;
  ASSERT_TRUE(client_->StartRelease("a", "test over", kTimeout, released.Done()));
  EXPECT_OK(released.Get());
  Answer<absl::StatusOr<EvalSums>> after;
  ASSERT_TRUE(client_->StartEvaluate("a", 0, 10, live, kTimeout, after.Done()));
  EXPECT_THAT(after.Get(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("job a is not prepared")));
}

TEST_F(WorkerServiceTest, AsynchronousCallsAnswerWithTheTokensReason) {
  auto cancel = std::make_shared<CancelToken>();
  const absl::Status why = absl::AbortedError("the job was stopped by the test");
  cancel->Cancel(why);
  Answer<absl::StatusOr<PrepareResult>> prepared;
  ASSERT_TRUE(client_->StartPrepare(Job("a"), state_, cancel, kTimeout, prepared.Done()));
  EXPECT_EQ(prepared.Get().status(), why);
  Answer<absl::StatusOr<EvalSums>> evaluated;
  ASSERT_TRUE(client_->StartEvaluate("a", 0, 10, cancel, kTimeout, evaluated.Done()));
  EXPECT_EQ(evaluated.Get().status(), why);
  // Nothing reached the worker.
  EXPECT_THAT(client_->Evaluate("a", 0, 10, live_, kTimeout),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("job a")));

  // A token cancelled while the call is out: the call ends with its reason, whether the
  // cancel lands before the worker answers or not (then the answer stands).
  ASSERT_THAT(client_->Prepare(Job("b"), state_, live_, kTimeout), IsOk());
  auto late = std::make_shared<CancelToken>();
  Answer<absl::StatusOr<EvalSums>> racing;
  ASSERT_TRUE(client_->StartEvaluate("b", 0, 10000, late, kTimeout, racing.Done()));
  late->Cancel(why);
  const absl::StatusOr<EvalSums> got = racing.Get();
  if (!got.ok()) EXPECT_EQ(got.status(), why);
}

// A port bound but not listening: connections to it are refused, and no one can take it.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~RefusingPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
};

// At 0692893 an elastic job's expected resize logged "error ... UNAVAILABLE ... rank 1 is
// gone" on every survivor.
TEST(StepFailureLevel, APeerGoneIsAWarningOtherFailuresErrors) {
  EXPECT_EQ(StepFailureLevel(absl::UnavailableError("gloo rank 0 of 4: rank 1 is gone")),
            spdlog::level::warn);
  EXPECT_EQ(StepFailureLevel(absl::InternalError("oneDNN convolution failed")), spdlog::level::err);
  EXPECT_EQ(StepFailureLevel(absl::DataLossError("digest mismatch")), spdlog::level::err);
}

TEST_F(WorkerServiceTest, AliveIsTrueOnlyWhereAWorkerListens) {
  EXPECT_TRUE(client_->Alive(absl::Seconds(10)));
  RefusingPort nobody;
  auto dead = NewGrpcWorkerClientFactory(Tls(CoordinatorTls(CredentialsDir())))
                  ->Connect(absl::StrCat("127.0.0.1:", nobody.port()));
  EXPECT_FALSE(dead->Alive(absl::Milliseconds(300)));
}

TEST_F(WorkerServiceTest, AMalformedPrepareStreamIsInvalidArgument) {
  auto stub = v1::Worker::NewStub(
      MakeChannel(address_, Tls(CoordinatorTls(CredentialsDir())), kWorkerIdentity));
  auto send = [&](const std::vector<v1::PrepareChunk>& chunks) {
    grpc::ClientContext ctx;
    v1::PrepareResponse resp;
    auto writer = stub->Prepare(&ctx, &resp);
    for (const v1::PrepareChunk& c : chunks) {
      if (!writer->Write(c)) break;  // the worker may answer before reading everything
    }
    writer->WritesDone();
    return writer->Finish();
  };
  v1::PrepareChunk no_job;
  *no_job.mutable_state()->mutable_header() = ToProto(state_->header);
  no_job.mutable_state()->set_data(state_->bytes.substr(0, 100));
  grpc::Status st = send({no_job});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("the first message must carry the job"));
  EXPECT_EQ(send({}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // A header again in a later message.
  v1::PrepareChunk first = no_job;
  *first.mutable_job() = ToProto(Job("a"));
  st = send({first, first});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("only the first message carries a header"));
  EXPECT_THAT(client_->Evaluate("a", 0, 10, live_, kTimeout),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("job a")));
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

// Only the coordinator's certificate opens a worker: a caller without one is
// UNAUTHENTICATED, another worker's (or a client's) is PERMISSION_DENIED, for every
// method, and the job held is untouched.
TEST_F(WorkerServiceTest, OnlyTheCoordinatorMayCall) {
  ASSERT_OK(client_->Prepare(Job("held"), state_, CancelToken(), kTimeout).status());
  struct Caller {
    const char* name;
    TlsFiles files;
    absl::StatusCode want;
  };
  const Caller callers[] = {
      {"no certificate", ClientTls(CredentialsDir()), absl::StatusCode::kUnauthenticated},
      {"a worker's certificate", WorkerTls(CredentialsDir(), "worker-0"),
       absl::StatusCode::kPermissionDenied},
  };
  for (const Caller& c : callers) {
    SCOPED_TRACE(c.name);
    auto stub = v1::Worker::NewStub(MakeChannel(address_, Tls(c.files), kWorkerIdentity));
    {
      grpc::ClientContext ctx;
      v1::FetchStateRequest req;
      req.set_job_id("held");
      auto reader = stub->FetchState(&ctx, req);
      v1::StateChunk chunk;
      EXPECT_FALSE(reader->Read(&chunk)) << "weights leaked";
      EXPECT_EQ(FromGrpcStatus(reader->Finish()).code(), c.want);
    }
    {
      grpc::ClientContext ctx;
      v1::ReleaseRequest req;
      req.set_job_id("held");
      v1::ReleaseResponse resp;
      EXPECT_EQ(FromGrpcStatus(stub->Release(&ctx, req, &resp)).code(), c.want);
    }
    {
      grpc::ClientContext ctx;
      v1::EvaluateRequest req;
      req.set_job_id("held");
      v1::EvaluateResponse resp;
      EXPECT_EQ(FromGrpcStatus(stub->Evaluate(&ctx, req, &resp)).code(), c.want);
    }
    {
      grpc::ClientContext ctx;
      v1::PrepareResponse resp;
      auto writer = stub->Prepare(&ctx, &resp);
      v1::PrepareChunk chunk;
      chunk.mutable_job()->set_job_id("rogue");
      writer->Write(chunk);
      writer->WritesDone();
      EXPECT_EQ(FromGrpcStatus(writer->Finish()).code(), c.want);
    }
    {
      grpc::ClientContext ctx;
      auto stream = stub->Steps(&ctx);
      v1::StepRequest req;
      req.set_job_id("held");
      stream->Write(req);
      stream->WritesDone();
      v1::StepResponse resp;
      EXPECT_FALSE(stream->Read(&resp));
      EXPECT_EQ(FromGrpcStatus(stream->Finish()).code(), c.want);
    }
  }
  // The job is still held: its state comes back to the coordinator.
  EXPECT_THAT(client_->FetchState("held", CancelToken(), kTimeout).status(), IsOk());
}

}  // namespace
}  // namespace lockstep
