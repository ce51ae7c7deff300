// FakeWorkers: many simulated workers in one process for the coordinator's scale
// benchmark. Contract: fake_workers.h.
#include "bench/scale/fake_workers.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/scale/sim_job.h"
#include "lockstep/v1/registry.grpc.pb.h"
#include "services/common/rpc/net.h"
#include "services/common/rpc/wire.h"

namespace lockstep {
namespace {

// FNV-1a over bytes as they stream past: ParamChecksum (core/train_state.h) in pieces.
class StreamingChecksum {
 public:
  void Add(std::string_view bytes) {
    for (unsigned char c : bytes) {
      h_ ^= c;
      h_ *= 1099511628211ull;
    }
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 1469598103934665603ull;
};

// One Prepare: the header, then the state in chunks; answers the params' checksum.
class PrepareCall final : public grpc::ServerReadReactor<v1::PrepareChunk> {
 public:
  PrepareCall(std::function<std::shared_ptr<SimJob>(const std::string&, int)> join,
              const FakeWorkerOptions& options, v1::PrepareResponse* response)
      : join_(std::move(join)), options_(options), response_(response), begin_(absl::Now()) {
    StartRead(&chunk_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(Done());
      return;
    }
    if (job_ == nullptr) {
      if (!chunk_.has_job() || !chunk_.state().has_header()) {
        Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no header in the first chunk"));
        return;
      }
      rank_ = chunk_.job().rank();
      header_ = FromProto(chunk_.state().header());
      job_ = join_(chunk_.job().job_id(), chunk_.job().world_size());
    }
    const std::string& data = chunk_.state().data();
    const uint64_t param_bytes = header_.param_count * sizeof(float);
    if (received_ < param_bytes) {
      checksum_.Add(std::string_view(data).substr(0, param_bytes - received_));
    }
    received_ += data.size();
    if (rank_ == 0) bytes_ += data;
    StartRead(&chunk_);
  }
  void OnDone() override { delete this; }

 private:
  grpc::Status Done() {
    absl::StatusOr<uint64_t> expected = header_.Bytes();
    if (job_ == nullptr || !expected.ok() || *expected != received_) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the state arrived incomplete");
    }
    response_->set_train_examples(options_.train_examples);
    response_->set_test_examples(options_.test_examples);
    response_->set_param_checksum(checksum_.value());
    job_->Prepared(rank_, checksum_.value(), begin_, absl::Now(), header_, std::move(bytes_));
    return grpc::Status::OK;
  }

  const std::function<std::shared_ptr<SimJob>(const std::string&, int)> join_;
  const FakeWorkerOptions options_;
  v1::PrepareResponse* const response_;
  const absl::Time begin_;
  v1::PrepareChunk chunk_;
  std::shared_ptr<SimJob> job_;
  int rank_ = 0;
  StateHeader header_;
  uint64_t received_ = 0;
  StreamingChecksum checksum_;
  std::string bytes_;  // rank 0's copy
};

// FetchState: rank 0's state in chunks, one write in flight.
class FetchCall final : public grpc::ServerWriteReactor<v1::StateChunk> {
 public:
  explicit FetchCall(std::shared_ptr<SimJob> job) {
    if (job == nullptr) {
      Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job"));
      return;
    }
    std::string bytes;
    const StateHeader header = job->State(&bytes);
    WriteStateChunks(header, bytes, [this](const v1::StateChunk& c) {
      chunks_.push_back(c);
      return true;
    });
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    if (next_ == chunks_.size()) {
      Finish(grpc::Status::OK);
      return;
    }
    StartWrite(&chunks_[next_++]);
  }
  std::vector<v1::StateChunk> chunks_;
  size_t next_ = 0;
};

class FakeWorkerService final : public v1::Worker::CallbackService, public SimJobs {
 public:
  explicit FakeWorkerService(const FakeWorkerOptions& options) : options_(options) {}

  std::shared_ptr<SimJob> Find(const std::string& job_id) override {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    return it == jobs_.end() ? nullptr : it->second;
  }
  std::shared_ptr<SimJob> Join(const std::string& job_id, int world_size) {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<SimJob>& job = jobs_[job_id];
    if (job == nullptr) job = std::make_shared<SimJob>(world_size, options_.compute);
    return job;
  }

  grpc::ServerReadReactor<v1::PrepareChunk>* Prepare(grpc::CallbackServerContext*,
                                                     v1::PrepareResponse* response) override {
    return new PrepareCall([this](const std::string& id, int n) { return Join(id, n); }, options_,
                           response);
  }
  grpc::ServerBidiReactor<v1::StepRequest, v1::StepResponse>* Steps(
      grpc::CallbackServerContext*) override {
    return new StepsStream(this);
  }
  grpc::ServerUnaryReactor* Evaluate(grpc::CallbackServerContext* ctx,
                                     const v1::EvaluateRequest* req,
                                     v1::EvaluateResponse* resp) override {
    const int64_t count = std::max<int64_t>(0, req->end() - req->begin());
    resp->set_count(count);
    resp->set_loss_sum(2.3 * static_cast<double>(count));
    resp->set_correct(count / 10);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerWriteReactor<v1::StateChunk>* FetchState(grpc::CallbackServerContext*,
                                                       const v1::FetchStateRequest* req) override {
    return new FetchCall(Find(req->job_id()));
  }
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* ctx, const v1::ReleaseRequest*,
                                    v1::ReleaseResponse*) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  const FakeWorkerOptions options_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<SimJob>> jobs_ ABSL_GUARDED_BY(mu_);
};

// One simulated worker's registration: its own connection to the coordinator.
struct Member {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::WorkerRegistry::Stub> stub;
  std::string address, id;
  std::atomic<bool> in_flight{false};  // a heartbeat not yet answered
};

class FakeWorkersImpl final : public FakeWorkers {
 public:
  explicit FakeWorkersImpl(const FakeWorkerOptions& options)
      : options_(options), service_(options) {}
  ~FakeWorkersImpl() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (heartbeats_.joinable()) heartbeats_.join();
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    // Heartbeats still in flight hold members: wait for them.
    for (auto& m : members_) {
      while (m->in_flight) absl::SleepFor(absl::Milliseconds(1));
    }
  }

  absl::Status Serve() {
    grpc::ServerBuilder builder;
    std::vector<int> ports(options_.workers);
    ConfigureServer(builder, "127.0.0.1:0", Transport::Plaintext(), &ports[0]);
    for (int i = 1; i < options_.workers; ++i) {
      builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &ports[i]);
    }
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) return absl::UnavailableError("the fake workers' server did not start");
    for (int port : ports) {
      auto m = std::make_unique<Member>();
      m->address = absl::StrCat("127.0.0.1:", port);
      members_.push_back(std::move(m));
    }
    return absl::OkStatus();
  }

  absl::Status Register(const std::string& coordinator);

  JobTiming Timing(const std::string& job_id) override {
    std::shared_ptr<SimJob> job = service_.Find(job_id);
    return job == nullptr ? JobTiming() : job->Timing();
  }
  int64_t heartbeats_ok() override { return ok_; }
  int64_t heartbeats_failed() override { return failed_; }

 private:
  void Heartbeats(absl::Duration interval);
  void Beat(Member* m);

  const FakeWorkerOptions options_;
  FakeWorkerService service_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::unique_ptr<Member>> members_;
  std::atomic<int64_t> ok_{0}, failed_{0};
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread heartbeats_;
};

absl::Status FakeWorkersImpl::Register(const std::string& coordinator) {
  absl::Mutex mu;
  int done = 0;
  absl::Status first_error;
  int64_t interval_ms = 1000;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<v1::RegisterRequest> requests(members_.size());
  std::vector<v1::RegisterResponse> responses(members_.size());
  for (size_t i = 0; i < members_.size(); ++i) {
    Member& m = *members_[i];
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection per worker, as in life
    m.channel = grpc::CreateCustomChannel(coordinator, grpc::InsecureChannelCredentials(), args);
    m.stub = v1::WorkerRegistry::NewStub(m.channel);
    requests[i].set_address(m.address);
    requests[i].set_device("cpu");
    requests[i].set_name(absl::StrCat("fake-", i));
    requests[i].set_threads(1);
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    contexts.back()->set_wait_for_ready(true);
    m.stub->async()->Register(
        contexts.back().get(), &requests[i], &responses[i], [&, i](grpc::Status st) {
          absl::MutexLock lock(&mu);
          if (st.ok()) {
            members_[i]->id = responses[i].worker_id();
            interval_ms = responses[i].heartbeat_interval_ms();
          } else if (first_error.ok()) {
            first_error = absl::UnavailableError(absl::StrCat("register: ", st.error_message()));
          }
          ++done;
        });
  }
  {
    absl::MutexLock lock(&mu);
    const int n = static_cast<int>(members_.size());
    auto all = [&done, n]() { return done == n; };
    mu.Await(absl::Condition(&all));
    if (!first_error.ok()) return first_error;
  }
  heartbeats_ = std::thread([this, interval_ms] { Heartbeats(absl::Milliseconds(interval_ms)); });
  return absl::OkStatus();
}

// Every worker heartbeats once per interval, their phases spread evenly over it.
void FakeWorkersImpl::Heartbeats(absl::Duration interval) {
  const size_t n = members_.size();
  absl::Time cycle = absl::Now();
  while (true) {
    for (size_t i = 0; i < n; ++i) {
      {
        absl::MutexLock lock(&mu_);
        const absl::Time at = cycle + interval * static_cast<double>(i) / static_cast<double>(n);
        if (mu_.AwaitWithTimeout(absl::Condition(&stop_), at - absl::Now())) return;
      }
      Beat(members_[i].get());
    }
    cycle += interval;
  }
}

void FakeWorkersImpl::Beat(Member* m) {
  if (m->in_flight.exchange(true)) return;  // the last one is still out
  struct Call {
    grpc::ClientContext ctx;
    v1::HeartbeatRequest req;
    v1::HeartbeatResponse resp;
  };
  auto* call = new Call;
  call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
  call->req.set_worker_id(m->id);
  m->stub->async()->Heartbeat(&call->ctx, &call->req, &call->resp,
                              [this, m, call](grpc::Status st) {
                                (st.ok() ? ok_ : failed_)++;
                                delete call;
                                m->in_flight = false;
                              });
}

}  // namespace

absl::StatusOr<std::unique_ptr<FakeWorkers>> FakeWorkers::Start(const std::string& coordinator,
                                                                const FakeWorkerOptions& options) {
  auto workers = std::make_unique<FakeWorkersImpl>(options);
  if (absl::Status st = workers->Serve(); !st.ok()) return st;
  if (absl::Status st = workers->Register(coordinator); !st.ok()) return st;
  return std::unique_ptr<FakeWorkers>(std::move(workers));
}

}  // namespace lockstep
