// WorkerClient: the coordinator's handle on one worker, in plain commands (core/commands.h).
// Contract: worker_client.h.
#include "services/coordinator/workers/worker_client.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "lockstep/v1/worker.grpc.pb.h"
#include "services/common/rpc/net.h"
#include "services/common/rpc/status.h"
#include "services/common/rpc/wire.h"

namespace lockstep {
namespace {

// A call's outcome: the token's reason if it was cancelled, else gRPC's status.
absl::Status Outcome(const CancelToken& cancel, const grpc::Status& st) {
  absl::Status why = cancel.status();
  return why.ok() ? FromGrpcStatus(st) : why;
}

// A call's context: its deadline, and cancelled with `cancel` while the call lasts.
class Call {
 public:
  Call(const CancelToken& cancel, absl::Duration timeout)
      : cancel_(cancel), on_cancel_(cancel.OnCancel([this] { ctx_.TryCancel(); })) {
    ctx_.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  grpc::ClientContext* ctx() { return &ctx_; }
  // The call's outcome: the token's reason if it was cancelled, else `st`.
  absl::Status Result(const grpc::Status& st) const { return Outcome(cancel_, st); }

 private:
  const CancelToken& cancel_;
  grpc::ClientContext ctx_;
  CancelToken::Callback on_cancel_;  // last: unregisters before ctx_ goes
};

// How long past a unary call's deadline its caller waits for gRPC's answer (normally none).
constexpr absl::Duration kAnswerMargin = absl::Seconds(10);

// How long a step stream's owner waits, once it cancelled the call, for gRPC to be done
// with it (OnDone, normally at once). Past it the reactor is left to end by itself.
constexpr absl::Duration kStreamDoneTimeout = absl::Seconds(10);

// A job's Steps stream on gRPC's callback API, so that a thousand workers cost no thread
// each: Send queues the command and returns at once (one write in flight, the rest
// queued in order); gRPC's own threads read the answers and hand them to the subscriber,
// or queue them for Receive. No Start* call is made under a lock of ours: gRPC may run a
// reaction inline. The reactor owns itself until OnDone, so that its owner's wait for
// gRPC (Detach) is bounded: an owner gone first leaves it nothing to call.
class StepReactor final : public grpc::ClientBidiReactor<v1::StepRequest, v1::StepResponse> {
 public:
  static std::shared_ptr<StepReactor> Start(v1::Worker::Stub* stub, std::string job_id,
                                            const CancelToken& cancel, absl::Duration lifetime) {
    std::shared_ptr<StepReactor> r(new StepReactor(std::move(job_id), cancel));
    r->self_ = r;  // until OnDone
    r->ctx_.set_deadline(absl::ToChronoTime(absl::Now() + lifetime));
    r->on_cancel_ = cancel.OnCancel([raw = r.get()] { raw->Cancel(); });
    stub->async()->Steps(&r->ctx_, r.get());
    r->StartRead(&r->response_);
    r->StartCall();
    return r;
  }

  // The owner lets go: cancels the call, waits at most `timeout` for gRPC to be done
  // with it, and from then on delivers nothing and touches no token.
  void Detach(absl::Duration timeout) {
    Cancel();
    if (!done_.WaitForNotificationWithTimeout(timeout)) {
      spdlog::error("job {}: a step stream did not end within {} of its cancel; left behind",
                    job_id_, absl::FormatDuration(timeout));
    }
    on_cancel_ = CancelToken::Callback();  // unregisters (waits for one running)
    absl::MutexLock lock(&read_mu_);
    deliver_ = nullptr;
    cancel_ = nullptr;
  }

  bool Send(const StepCommand& command) {
    v1::StepRequest request = ToProto(job_id_, command);
    {
      absl::MutexLock lock(&write_mu_);
      if (closed_ || broken_) return false;
      outbox_.push_back(std::move(request));
    }
    PumpWrites();
    return true;
  }
  void CloseSend() {
    {
      absl::MutexLock lock(&write_mu_);
      closed_ = true;
    }
    PumpWrites();
  }
  absl::StatusOr<StepResult> Receive(absl::Duration timeout) {
    absl::MutexLock lock(&read_mu_);
    auto ready = [this]()
                     ABSL_SHARED_LOCKS_REQUIRED(read_mu_) { return !inbox_.empty() || cancelled_; };
    if (!read_mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat("no step answer within ", absl::FormatDuration(timeout)));
    }
    if (inbox_.empty()) {  // cancelled: the token's reason, if it was the token
      if (cancel_ != nullptr && !cancel_->status().ok()) return cancel_->status();
      return absl::CancelledError("step stream cancelled");
    }
    if (!inbox_.front().ok()) return inbox_.front().status();  // the end stays: said again
    absl::StatusOr<StepResult> next = std::move(inbox_.front());
    inbox_.pop_front();
    return next;
  }
  void Subscribe(StepStream::Deliver deliver) {
    absl::MutexLock lock(&read_mu_);
    deliver_ = std::move(deliver);
    for (auto& item : inbox_) deliver_(std::move(item));
    inbox_.clear();
  }
  void Cancel() {
    ctx_.TryCancel();
    absl::MutexLock lock(&read_mu_);
    cancelled_ = true;
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&write_mu_);
      writing_ = false;
      if (!ok) broken_ = true;  // the stream is ending: OnDone says why
    }
    PumpWrites();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended: OnDone brings its status
    Hand(FromProto(response_));
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    absl::Status end = FromGrpcStatus(status);
    {
      absl::MutexLock lock(&read_mu_);
      // The token's reason if it was cancelled (a detached stream has none to ask).
      if (cancel_ != nullptr && !cancel_->status().ok()) end = cancel_->status();
    }
    Hand(end.ok() ? absl::OutOfRangeError("step stream ended") : end);
    done_.Notify();
    std::shared_ptr<StepReactor> last = std::move(self_);  // may be the last reference
  }

 private:
  StepReactor(std::string job_id, const CancelToken& cancel)
      : job_id_(std::move(job_id)), cancel_(&cancel) {}

  // Starts the next write, or WritesDone once closed and every command is out.
  void PumpWrites() {
    enum { kNone, kWrite, kWritesDone } next = kNone;
    {
      absl::MutexLock lock(&write_mu_);
      if (writing_ || broken_) return;
      if (!outbox_.empty()) {
        writing_message_ = std::move(outbox_.front());
        outbox_.pop_front();
        writing_ = true;
        next = kWrite;
      } else if (closed_ && !writes_done_) {
        writes_done_ = true;
        next = kWritesDone;
      }
    }
    // Only the thread that set writing_ (or writes_done_) gets here with work to start.
    if (next == kWrite) StartWrite(&writing_message_);
    if (next == kWritesDone) StartWritesDone();
  }
  void Hand(absl::StatusOr<StepResult> item) {
    absl::MutexLock lock(&read_mu_);
    if (deliver_) {
      deliver_(std::move(item));
    } else {
      inbox_.push_back(std::move(item));
    }
  }

  const std::string job_id_;
  grpc::ClientContext ctx_;
  std::shared_ptr<StepReactor> self_;  // set from Start until OnDone
  CancelToken::Callback on_cancel_;    // until Detach
  absl::Mutex write_mu_;
  std::deque<v1::StepRequest> outbox_ ABSL_GUARDED_BY(write_mu_);
  v1::StepRequest writing_message_;  // the write in flight (owned by whoever set writing_)
  bool writing_ ABSL_GUARDED_BY(write_mu_) = false;
  bool closed_ ABSL_GUARDED_BY(write_mu_) = false;
  bool writes_done_ ABSL_GUARDED_BY(write_mu_) = false;
  bool broken_ ABSL_GUARDED_BY(write_mu_) = false;
  v1::StepResponse response_;  // the read in flight (one at a time)
  absl::Mutex read_mu_;        // taken before the subscriber's locks, never after
  const CancelToken* cancel_ ABSL_GUARDED_BY(read_mu_);  // null once detached
  StepStream::Deliver deliver_ ABSL_GUARDED_BY(read_mu_);
  std::deque<absl::StatusOr<StepResult>> inbox_ ABSL_GUARDED_BY(read_mu_);
  bool cancelled_ ABSL_GUARDED_BY(read_mu_) = false;
  absl::Notification done_;
};

// A Prepare on gRPC's callback API: the job and the state's chunks written one at a time,
// each as the last one's write completes, and the answer handed over from OnDone, so that
// preparing a thousand workers costs no thread each. It owns itself until OnDone; the
// token's callback holds it while it cancels.
class PrepareReactor final : public grpc::ClientWriteReactor<v1::PrepareChunk> {
 public:
  using Done = std::function<void(absl::StatusOr<PrepareResult>)>;

  static void Start(v1::Worker::Stub* stub, const JobAssignment& job,
                    std::shared_ptr<const SharedState> state,
                    std::shared_ptr<const CancelToken> cancel, absl::Duration timeout, Done done) {
    std::shared_ptr<PrepareReactor> r(
        new PrepareReactor(ToProto(job), std::move(state), std::move(cancel), std::move(done)));
    r->self_ = r;  // until OnDone
    r->ctx_.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    stub->async()->Prepare(&r->ctx_, &r->response_, r.get());
    r->on_cancel_ = r->cancel_->OnCancel([weak = std::weak_ptr<PrepareReactor>(r)] {
      if (std::shared_ptr<PrepareReactor> live = weak.lock()) live->ctx_.TryCancel();
    });
    r->WriteNext();
    r->StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (ok) WriteNext();  // else the call is ending: OnDone says why
  }
  void OnDone(const grpc::Status& status) override {
    on_cancel_ = CancelToken::Callback();  // unregisters (waits for one running)
    absl::Status st = Outcome(*cancel_, status);
    done_(st.ok() ? absl::StatusOr<PrepareResult>(FromProto(response_))
                  : absl::StatusOr<PrepareResult>(std::move(st)));
    std::shared_ptr<PrepareReactor> last = std::move(self_);  // may be the last reference
  }

 private:
  PrepareReactor(v1::PrepareHeader job, std::shared_ptr<const SharedState> state,
                 std::shared_ptr<const CancelToken> cancel, Done done)
      : job_(std::move(job)),
        state_(std::move(state)),
        cancel_(std::move(cancel)),
        done_(std::move(done)),
        chunks_(StateChunkCount(state_->bytes)) {}

  // The next chunk (the job's header rides on the first), or WritesDone after the last.
  // One write at a time: called from Start, then from the last write's OnWriteDone.
  void WriteNext() {
    if (next_ == chunks_) {
      StartWritesDone();
      return;
    }
    chunk_.Clear();
    if (next_ == 0) *chunk_.mutable_job() = job_;
    *chunk_.mutable_state() = StateChunkAt(state_->header, state_->bytes, next_++);
    StartWrite(&chunk_);
  }

  const v1::PrepareHeader job_;
  const std::shared_ptr<const SharedState> state_;
  const std::shared_ptr<const CancelToken> cancel_;
  const Done done_;
  const size_t chunks_;
  size_t next_ = 0;         // the next chunk to write
  v1::PrepareChunk chunk_;  // the write in flight
  v1::PrepareResponse response_;
  grpc::ClientContext ctx_;
  std::shared_ptr<PrepareReactor> self_;  // set from Start until OnDone
  CancelToken::Callback on_cancel_;       // until OnDone
};

// The owner's handle on a StepReactor.
class GrpcStepStream final : public StepStream {
 public:
  GrpcStepStream(v1::Worker::Stub* stub, std::string job_id, const CancelToken& cancel,
                 absl::Duration lifetime)
      : reactor_(StepReactor::Start(stub, std::move(job_id), cancel, lifetime)) {}
  ~GrpcStepStream() override { reactor_->Detach(kStreamDoneTimeout); }

  bool Send(const StepCommand& command) override { return reactor_->Send(command); }
  void CloseSend() override { reactor_->CloseSend(); }
  absl::StatusOr<StepResult> Receive(absl::Duration timeout) override {
    return reactor_->Receive(timeout);
  }
  bool Subscribe(Deliver deliver) override {
    reactor_->Subscribe(std::move(deliver));
    return true;
  }
  void Cancel() override { reactor_->Cancel(); }

 private:
  const std::shared_ptr<StepReactor> reactor_;
};

class GrpcWorkerClient final : public WorkerClient {
 public:
  GrpcWorkerClient(const std::string& address, const Transport& transport)
      : channel_(MakeChannel(address, transport, kWorkerIdentity)),
        stub_(v1::Worker::NewStub(channel_)),
        health_(grpc::health::v1::Health::NewStub(channel_)) {}

  absl::StatusOr<PrepareResult> Prepare(const JobAssignment& job,
                                        std::shared_ptr<const SharedState> state,
                                        const CancelToken& cancel,
                                        absl::Duration timeout) override {
    if (absl::Status st = cancel.status(); !st.ok()) return st;
    Call call(cancel, timeout);
    v1::PrepareResponse resp;
    auto writer = stub_->Prepare(call.ctx(), &resp);
    bool first = true;
    const bool ok = WriteStateChunks(state->header, state->bytes, [&](const v1::StateChunk& c) {
      v1::PrepareChunk chunk;
      if (first) *chunk.mutable_job() = ToProto(job);
      first = false;
      *chunk.mutable_state() = c;
      return writer->Write(chunk);
    });
    if (ok) writer->WritesDone();
    absl::Status st = call.Result(writer->Finish());
    if (!st.ok()) return st;
    return FromProto(resp);
  }

  absl::StatusOr<std::unique_ptr<StepStream>> OpenSteps(const std::string& job_id,
                                                        const CancelToken& cancel,
                                                        absl::Duration lifetime) override {
    if (absl::Status st = cancel.status(); !st.ok()) return st;
    return std::make_unique<GrpcStepStream>(stub_.get(), job_id, cancel, lifetime);
  }

  absl::StatusOr<EvalSums> Evaluate(const std::string& job_id, int64_t begin, int64_t end,
                                    const CancelToken& cancel, absl::Duration timeout) override {
    if (absl::Status st = cancel.status(); !st.ok()) return st;
    Call call(cancel, timeout);
    v1::EvaluateRequest req;
    req.set_job_id(job_id);
    req.set_begin(begin);
    req.set_end(end);
    v1::EvaluateResponse resp;
    absl::Status st = call.Result(stub_->Evaluate(call.ctx(), req, &resp));
    if (!st.ok()) return st;
    return FromProto(resp);
  }

  absl::StatusOr<TrainState> FetchState(const std::string& job_id, const CancelToken& cancel,
                                        absl::Duration timeout) override {
    if (absl::Status st = cancel.status(); !st.ok()) return st;
    Call call(cancel, timeout);
    v1::FetchStateRequest req;
    req.set_job_id(job_id);
    auto reader = stub_->FetchState(call.ctx(), req);
    v1::StateChunk chunk;
    StateChunkAssembler state;
    absl::Status st;
    while (st.ok() && reader->Read(&chunk)) st = state.Add(chunk);
    if (!st.ok()) {
      call.ctx()->TryCancel();
      reader->Finish().ok();
      return absl::DataLossError(absl::StrCat("FetchState: ", st.message()));
    }
    st = call.Result(reader->Finish());
    if (!st.ok()) return st;
    absl::StatusOr<TrainState> result = std::move(state).Finish();
    if (!result.ok())
      return absl::DataLossError(absl::StrCat("FetchState: ", result.status().message()));
    return result;
  }

  absl::Status Release(const std::string& job_id, const std::string& reason,
                       absl::Duration timeout) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    v1::ReleaseRequest req;
    req.set_job_id(job_id);
    req.set_reason(reason);
    v1::ReleaseResponse resp;
    return FromGrpcStatus(stub_->Release(&ctx, req, &resp));
  }

  bool StartPrepare(const JobAssignment& job, std::shared_ptr<const SharedState> state,
                    std::shared_ptr<const CancelToken> cancel, absl::Duration timeout,
                    std::function<void(absl::StatusOr<PrepareResult>)> done) override {
    if (absl::Status st = cancel->status(); !st.ok()) {
      done(st);
    } else {
      PrepareReactor::Start(stub_.get(), job, std::move(state), std::move(cancel), timeout,
                            std::move(done));
    }
    return true;
  }

  bool StartEvaluate(const std::string& job_id, int64_t begin, int64_t end,
                     std::shared_ptr<const CancelToken> cancel, absl::Duration timeout,
                     std::function<void(absl::StatusOr<EvalSums>)> done) override {
    if (absl::Status st = cancel->status(); !st.ok()) {
      done(st);
      return true;
    }
    // The call's state lives until gRPC has answered (the callback holds it).
    struct EvaluateCall {
      grpc::ClientContext ctx;
      v1::EvaluateRequest req;
      v1::EvaluateResponse resp;
      std::shared_ptr<const CancelToken> cancel;
      CancelToken::Callback on_cancel;
    };
    auto call = std::make_shared<EvaluateCall>();
    call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    call->req.set_job_id(job_id);
    call->req.set_begin(begin);
    call->req.set_end(end);
    call->cancel = std::move(cancel);
    // Registered before the call starts (a cancel then cancels it as it starts), so that
    // the answer never races the registration.
    call->on_cancel = call->cancel->OnCancel([weak = std::weak_ptr<EvaluateCall>(call)] {
      if (std::shared_ptr<EvaluateCall> live = weak.lock()) live->ctx.TryCancel();
    });
    EvaluateCall* c = call.get();
    stub_->async()->Evaluate(
        &c->ctx, &c->req, &c->resp, [call, done = std::move(done)](grpc::Status status) {
          call->on_cancel = CancelToken::Callback();  // unregisters (waits for one running)
          absl::Status st = Outcome(*call->cancel, status);
          done(st.ok() ? absl::StatusOr<EvalSums>(FromProto(call->resp))
                       : absl::StatusOr<EvalSums>(std::move(st)));
        });
    return true;
  }

  bool StartRelease(const std::string& job_id, const std::string& reason, absl::Duration timeout,
                    std::function<void(absl::Status)> done) override {
    struct ReleaseCall {
      grpc::ClientContext ctx;
      v1::ReleaseRequest req;
      v1::ReleaseResponse resp;
    };
    auto call = std::make_shared<ReleaseCall>();
    call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    call->req.set_job_id(job_id);
    call->req.set_reason(reason);
    ReleaseCall* c = call.get();
    stub_->async()->Release(
        &c->ctx, &c->req, &c->resp,
        [call, done = std::move(done)](grpc::Status status) { done(FromGrpcStatus(status)); });
    return true;
  }

  bool Alive(absl::Duration timeout) override {
    struct Answer {
      absl::Notification given;
      std::atomic<bool> alive{false};
    };
    auto answer = std::make_shared<Answer>();
    CheckAlive(timeout, [answer](bool alive) {
      answer->alive = alive;
      answer->given.Notify();
    });
    // gRPC answers by the call's deadline; none a margin past it is no worker.
    return answer->given.WaitForNotificationWithTimeout(timeout + kAnswerMargin) && answer->alive;
  }

  void CheckAlive(absl::Duration timeout, std::function<void(bool)> done) override {
    // The call's state lives until gRPC has answered (the callback holds it).
    struct HealthCall {
      grpc::ClientContext ctx;
      grpc::health::v1::HealthCheckRequest req;
      grpc::health::v1::HealthCheckResponse resp;
    };
    auto call = std::make_shared<HealthCall>();
    call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    HealthCall* c = call.get();
    health_->async()->Check(
        &c->ctx, &c->req, &c->resp,
        [call = std::move(call), done = std::move(done)](grpc::Status st) {
          done(st.ok() && call->resp.status() == grpc::health::v1::HealthCheckResponse::SERVING);
        });
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Worker::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

class GrpcFactory final : public WorkerClientFactory {
 public:
  explicit GrpcFactory(Transport transport) : transport_(std::move(transport)) {}
  std::unique_ptr<WorkerClient> Connect(const std::string& address) override {
    return std::make_unique<GrpcWorkerClient>(address, transport_);
  }

 private:
  const Transport transport_;
};

}  // namespace

std::unique_ptr<WorkerClientFactory> NewGrpcWorkerClientFactory(const Transport& transport) {
  return std::make_unique<GrpcFactory>(transport);
}

}  // namespace lockstep
