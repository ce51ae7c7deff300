// Registration: keeps this worker registered with the coordinator: registers with backoff,
// heartbeats, and registers again when forgotten. Contract: registration.h.
#include "services/worker/registration.h"

#include <spdlog/spdlog.h>

#include "absl/time/time.h"
#include "services/common/observability/job_log.h"

namespace lockstep {

Registration::Registration(std::shared_ptr<grpc::Channel> coordinator, v1::RegisterRequest request,
                           WorkerMetrics* metrics)
    : stub_(v1::WorkerRegistry::NewStub(coordinator)),
      request_(std::move(request)),
      metrics_(metrics) {
  thread_ = std::thread([this] { Loop(); });
}

Registration::~Registration() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void Registration::Ship(v1::LogLine line) {
  absl::MutexLock lock(&ship_mu_);
  shipped_.push_back(std::move(line));
  if (shipped_.size() > kMaxShipped) shipped_.pop_front();
}

void Registration::Leave() {
  absl::MutexLock lock(&mu_);
  leaving_ = true;
}

bool Registration::gone() {
  absl::MutexLock lock(&mu_);
  return gone_ || !registered_;
}

void Registration::Loop() {
  absl::Duration wait = absl::Milliseconds(200);
  std::string id;
  absl::Duration interval = absl::Seconds(1);
  while (true) {
    bool leaving = false;
    {
      absl::MutexLock lock(&mu_);
      // A leave is told at once, not at the next beat.
      auto due = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_ || (leaving_ && !leave_told_);
      };
      mu_.AwaitWithTimeout(absl::Condition(&due), id.empty() ? wait : interval);
      if (stop_) return;
      leaving = leaving_;
      if (leaving && (id.empty() || gone_)) {  // nobody to tell: it never registers again
        leave_told_ = true;
        continue;
      }
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
    if (id.empty()) {
      v1::RegisterResponse resp;
      grpc::Status st = stub_->Register(&ctx, request_, &resp);
      if (!st.ok()) {
        spdlog::warn("register with the coordinator: {} (retrying)", st.error_message());
        wait = std::min(wait * 2, absl::Seconds(5));
        continue;
      }
      id = resp.worker_id();
      if (metrics_ != nullptr) metrics_->OnRegistered();
      interval = absl::Milliseconds(std::max<int64_t>(100, resp.heartbeat_interval_ms()));
      wait = absl::Milliseconds(200);
      spdlog::info("registered as {} (device {}, address {})", id, request_.device(),
                   request_.address());
      SetLogWorkerId(id);
      absl::MutexLock lock(&mu_);
      registered_ = true;
      continue;
    }
    v1::HeartbeatRequest req;
    req.set_worker_id(id);
    req.set_leaving(leaving);
    {
      absl::MutexLock lock(&ship_mu_);
      for (v1::LogLine& line : shipped_) *req.add_logs() = std::move(line);
      shipped_.clear();
    }
    v1::HeartbeatResponse resp;
    grpc::Status st = stub_->Heartbeat(&ctx, req, &resp);
    if (metrics_ != nullptr) metrics_->OnHeartbeat(st.ok());
    if (leaving) {
      absl::MutexLock lock(&mu_);
      leave_told_ = true;
      if (!st.ok()) {
        spdlog::warn("heartbeat while leaving: {}; nothing left to wait for", st.error_message());
        gone_ = true;
      }
    } else if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
      spdlog::warn("the coordinator forgot worker {}; registering again", id);
      id.clear();
      absl::MutexLock lock(&mu_);
      registered_ = false;
    } else if (!st.ok()) {
      spdlog::warn("heartbeat: {}", st.error_message());
    }
  }
}

}  // namespace lockstep
