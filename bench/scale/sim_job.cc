// SimJob: one job as the fake workers hold it, and the clock that answers its steps.
// Contract: sim_job.h.
#include "bench/scale/sim_job.h"

#include <cmath>

namespace lockstep {

SimJob::SimJob(int world_size, absl::Duration compute)
    : world_size_(world_size), compute_(compute) {
  clock_ = std::thread([this] { Clock(); });
}

SimJob::~SimJob() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  clock_.join();
}

void SimJob::Prepared(int rank, uint64_t checksum, absl::Time begin, absl::Time end,
                      const StateHeader& header, std::string bytes) {
  absl::MutexLock lock(&mu_);
  checksum_ = checksum;
  if (timing_.prepare_begin == absl::Time() || begin < timing_.prepare_begin) {
    timing_.prepare_begin = begin;
  }
  timing_.prepare_end = std::max(timing_.prepare_end, end);
  if (rank == 0) {
    header_ = header;
    bytes_ = std::move(bytes);
  }
}

StateHeader SimJob::State(std::string* bytes) {
  absl::MutexLock lock(&mu_);
  *bytes = bytes_;
  StateHeader h = header_;
  h.step = header_.step + next_;
  return h;
}

void SimJob::Attach(StepsStream* stream) {
  absl::MutexLock lock(&mu_);
  streams_.insert(stream);
}

void SimJob::Detach(StepsStream* stream) {
  absl::MutexLock lock(&mu_);
  streams_.erase(stream);
}

void SimJob::Arrive(int64_t step) {
  absl::MutexLock lock(&mu_);
  Arrivals& a = arrivals_[step];
  ++a.count;
  a.last = absl::Now();
}

JobTiming SimJob::Timing() {
  absl::MutexLock lock(&mu_);
  return timing_;
}

v1::StepResponse SimJob::Answer(int64_t step, absl::Duration took) const {
  v1::StepResponse r;
  r.set_step(step);
  r.set_loss(2.3f * std::exp(-0.001f * static_cast<float>(step)));
  r.set_accuracy(0.1f);
  r.set_param_checksum(checksum_);  // the params never change
  r.set_compute_ms(absl::ToDoubleMilliseconds(compute_));
  r.set_step_ms(absl::ToDoubleMilliseconds(took));
  return r;
}

void SimJob::Clock() {
  while (true) {
    absl::Time start;
    {
      absl::MutexLock lock(&mu_);
      auto all_arrived = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        auto it = arrivals_.find(next_);
        return stop_ || (it != arrivals_.end() && it->second.count >= world_size_);
      };
      mu_.Await(absl::Condition(&all_arrived));
      if (stop_) return;
      const absl::Time last = arrivals_[next_].last;
      arrivals_.erase(next_);
      start = last;
      if (last_end_ != absl::InfinitePast()) {
        if (last > last_end_) {
          timing_.late += last - last_end_;
          ++timing_.late_steps;
        }
        start = std::max(last, last_end_);
      }
    }
    absl::SleepFor(start + compute_ - absl::Now());
    absl::MutexLock lock(&mu_);
    const v1::StepResponse answer = Answer(next_, absl::Now() - start);
    for (StepsStream* s : streams_) s->Answer(answer);
    // The step ends when its compute does: this process's own lag in answering is not
    // charged to the next step's start.
    last_end_ = start + compute_;
    if (timing_.steps == 0) timing_.first_answer = absl::Now();
    timing_.last_answer = absl::Now();
    ++next_;
    ++timing_.steps;
  }
}

StepsStream::StepsStream(SimJobs* jobs) : jobs_(jobs) { StartRead(&request_); }

void StepsStream::Answer(const v1::StepResponse& response) {
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  --pending_;
  outbox_.push_back(response);
  Pump();
}

void StepsStream::OnReadDone(bool ok) {
  if (ok && job_ == nullptr) {
    job_ = jobs_->Find(request_.job_id());
    if (job_ != nullptr) job_->Attach(this);
  }
  {
    absl::MutexLock lock(&mu_);
    if (!ok) reads_done_ = true;
    if (ok && job_ == nullptr && status_.ok()) {
      status_ = grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job: " + request_.job_id());
    }
    if (!ok || finished_ || !status_.ok()) {
      Pump();
      return;
    }
    ++pending_;
  }
  job_->Arrive(request_.step());
  StartRead(&request_);
}

void StepsStream::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!ok && status_.ok()) status_ = grpc::Status(grpc::StatusCode::CANCELLED, "write failed");
  Pump();
}

void StepsStream::OnCancel() {
  absl::MutexLock lock(&mu_);
  if (status_.ok()) status_ = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  Pump();
}

void StepsStream::OnDone() {
  if (job_ != nullptr) job_->Detach(this);
  delete this;
}

void StepsStream::Pump() {
  if (finished_) return;
  if (!writing_ && !outbox_.empty() && status_.ok()) {
    message_ = std::move(outbox_.front());
    outbox_.pop_front();
    writing_ = true;
    StartWrite(&message_);
  }
  if (!writing_ && (!status_.ok() || (reads_done_ && pending_ == 0 && outbox_.empty()))) {
    finished_ = true;
    Finish(status_);
  }
}

}  // namespace lockstep
