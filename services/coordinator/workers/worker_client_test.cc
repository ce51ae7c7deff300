// The gRPC worker client's step streams against a Worker server in this process: the
// answers come back in order through a StepFanout, a server's error and the job's cancel
// end the wait, and many streams cost no thread each. A wait that should end by an event
// has a far longer deadline, so its status says what ended it (no wall-clock bound).
#include "services/coordinator/workers/worker_client.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/testing.h"
#include "lockstep/v1/worker.grpc.pb.h"
#include "services/coordinator/jobs/step_fanout.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

// Answers each step command with its step and loss = the shard's size, one at a time;
// with `fail_after` >= 0, ends the stream with UNAVAILABLE after that many answers.
class EchoSteps final : public grpc::ServerBidiReactor<v1::StepRequest, v1::StepResponse> {
 public:
  explicit EchoSteps(int fail_after) : fail_after_(fail_after) { StartRead(&request_); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    if (answered_ == fail_after_) {
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker broke"));
      return;
    }
    response_.set_step(request_.step());
    response_.set_loss(static_cast<float>(request_.indices_size()));
    ++answered_;
    StartWrite(&response_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
      return;
    }
    StartRead(&request_);
  }
  void OnDone() override { delete this; }

 private:
  const int fail_after_;
  int answered_ = 0;
  v1::StepRequest request_;
  v1::StepResponse response_;
};

class EchoWorker final : public v1::Worker::CallbackService {
 public:
  explicit EchoWorker(int fail_after) : fail_after_(fail_after) {}
  grpc::ServerBidiReactor<v1::StepRequest, v1::StepResponse>* Steps(
      grpc::CallbackServerContext*) override {
    return new EchoSteps(fail_after_);
  }

 private:
  const int fail_after_;
};

class WorkerClientTest : public ::testing::Test {
 protected:
  void Serve(int fail_after = -1) {
    service_ = std::make_unique<EchoWorker>(fail_after);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }
  std::vector<std::unique_ptr<WorkerClient>> Clients(int n) {
    std::vector<std::unique_ptr<WorkerClient>> clients;
    for (int r = 0; r < n; ++r) clients.push_back(factory_->Connect(address_));
    return clients;
  }

  std::unique_ptr<WorkerClientFactory> factory_ =
      NewGrpcWorkerClientFactory(Transport::Plaintext());
  std::unique_ptr<EchoWorker> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

absl::Status Blame(int rank, const absl::Status& st) {
  return absl::Status(st.code(), absl::StrCat("worker w", rank, ": ", st.message()));
}

// Worker r's shard has r % 8 + 1 indices.
std::vector<StepCommand> Commands(int n, int64_t step) {
  static const int32_t kIndices[] = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<StepCommand> commands(n);
  for (int r = 0; r < n; ++r) {
    commands[r].step = step;
    commands[r].indices = {kIndices, static_cast<size_t>(r % 8 + 1)};
  }
  return commands;
}

int Threads() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST_F(WorkerClientTest, PipelinedStepsComeBackInOrderWithoutAThreadPerStream) {
  Serve();
  constexpr int kWorkers = 64, kSteps = 5;
  auto clients = Clients(kWorkers);
  CancelToken cancel;
  const int before = Threads();
  auto fanout = StepFanout::Open(clients, "job-1", cancel, absl::Minutes(1), Blame);
  ASSERT_OK(fanout.status());
  for (int64_t s = 0; s < kSteps; ++s) (*fanout)->Send(Commands(kWorkers, s));
  for (int64_t s = 0; s < kSteps; ++s) {
    auto got = (*fanout)->Take(s, absl::Seconds(30));
    ASSERT_OK(got.status());
    ASSERT_EQ(got->size(), static_cast<size_t>(kWorkers));
    for (int r = 0; r < kWorkers; ++r) {
      EXPECT_EQ((*got)[r].step, s);
      EXPECT_EQ((*got)[r].loss, r % 8 + 1);  // its own shard's answer
    }
  }
  // gRPC's own threads serve every stream: a reader thread per stream would add 64.
  EXPECT_LT(Threads() - before, kWorkers / 2);
  EXPECT_OK((*fanout)->Close(absl::Seconds(30)));  // every stream ended cleanly
}

TEST_F(WorkerClientTest, AWorkersErrorEndsTheWaitNamingIt) {
  Serve(/*fail_after=*/1);
  auto clients = Clients(3);
  CancelToken cancel;
  auto fanout = StepFanout::Open(clients, "job-1", cancel, absl::Minutes(1), Blame);
  ASSERT_OK(fanout.status());
  (*fanout)->Send(Commands(3, 0));
  ASSERT_OK((*fanout)->Take(0, absl::Seconds(30)).status());
  (*fanout)->Send(Commands(3, 1));  // every worker fails at its second command
  auto got = (*fanout)->Take(1, absl::Seconds(30));
  EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("worker broke")));
}

TEST_F(WorkerClientTest, TheJobsCancelTokenEndsTheStreams) {
  Serve();
  auto clients = Clients(2);
  CancelToken cancel;
  auto fanout = StepFanout::Open(clients, "job-1", cancel, absl::Minutes(1), Blame);
  ASSERT_OK(fanout.status());
  cancel.Cancel(absl::CancelledError("by the user"));
  auto got = (*fanout)->Take(0, absl::Seconds(30));
  EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kCancelled, HasSubstr("by the user")));
}

TEST_F(WorkerClientTest, AStreamReadWithoutSubscribingEndsCleanly) {
  Serve();
  auto client = factory_->Connect(address_);
  CancelToken cancel;
  auto stream = client->OpenSteps("job-1", cancel, absl::Minutes(1));
  ASSERT_OK(stream.status());
  ASSERT_TRUE((*stream)->Send(Commands(1, 0)[0]));
  (*stream)->CloseSend();
  auto answer = (*stream)->Receive(absl::Seconds(30));
  ASSERT_OK(answer.status());
  EXPECT_EQ(answer->step, 0);
  EXPECT_THAT((*stream)->Receive(absl::Seconds(30)).status(),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("ended")));
  EXPECT_THAT((*stream)->Receive(absl::Seconds(30)).status(),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("ended")));
}

TEST_F(WorkerClientTest, ReceiveWaitsAtMostItsTimeoutAndEndsAtOnceOnACancel) {
  Serve();
  auto client = factory_->Connect(address_);
  CancelToken cancel;
  auto stream = client->OpenSteps("job-1", cancel, absl::Minutes(1));
  ASSERT_OK(stream.status());
  // No command sent: no answer comes (it waited for ever at 400deec).
  EXPECT_THAT((*stream)->Receive(absl::Milliseconds(50)).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("no step answer")));
  absl::Status got;
  std::thread reader([&] { got = (*stream)->Receive(absl::Minutes(1)).status(); });
  cancel.Cancel(absl::CancelledError("by the user"));
  reader.join();
  EXPECT_EQ(got.code(), absl::StatusCode::kCancelled) << got;
  stream->reset();  // the reactor is done (or left to end by itself): bounded either way
}

}  // namespace
}  // namespace lockstep::testing
