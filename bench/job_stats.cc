// Runs a job on a coordinator and averages its step events' time split. Contract: job_stats.h.
#include "bench/job_stats.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "services/common/rpc/status.h"

namespace lockstep {

namespace {

absl::Status Cancel(v1::JobService::Stub& jobs, const std::string& id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::CancelJobRequest req;
  req.set_id(id);
  v1::Job job;
  return FromGrpcStatus(jobs.CancelJob(&ctx, req, &job));
}

}  // namespace

v1::JobSpec CnnSpec(int workers, int steps) {
  v1::JobSpec spec;
  spec.mutable_model()->set_kind("cnn");
  spec.mutable_optimizer()->set_kind("sgd");
  spec.mutable_optimizer()->set_learning_rate(0.1);
  spec.mutable_optimizer()->set_momentum(0.9);
  spec.set_global_batch_size(128);
  spec.set_steps(steps);
  spec.set_workers(workers);
  return spec;
}

absl::StatusOr<JobStats> RunAndMeasure(v1::JobService::Stub& jobs, const v1::JobSpec& spec,
                                       int warmup, absl::Duration timeout) {
  v1::Job job;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    absl::Status st = FromGrpcStatus(jobs.SubmitJob(&ctx, spec, &job));
    if (!st.ok()) return st;
  }
  grpc::ClientContext ctx;
  if (timeout != absl::InfiniteDuration()) {
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  v1::WatchJobRequest req;
  req.set_id(job.id());
  auto reader = jobs.WatchJob(&ctx, req);
  v1::JobEvent e;
  JobStats s;
  s.workers = static_cast<int>(spec.workers());
  while (reader->Read(&e)) {
    if (!e.has_step() || e.step().step() <= warmup) continue;
    const auto& st = e.step();
    s.wall += st.wall_ms();
    s.worker += st.worker_step_ms();
    s.compute += st.compute_ms();
    s.allreduce += st.allreduce_ms();
    s.update += st.update_ms();
    ++s.steps;
  }
  absl::Status st = FromGrpcStatus(reader->Finish());
  if (absl::IsDeadlineExceeded(st)) {
    const absl::Status cancelled = Cancel(jobs, job.id());
    return absl::DeadlineExceededError(
        absl::StrCat(job.id(), " did not end within ", absl::FormatDuration(timeout), " (", s.steps,
                     " steps measured); cancel: ", cancelled.ToString()));
  }
  if (!st.ok()) return st;
  grpc::ClientContext get_ctx;
  get_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::GetJobRequest get;
  get.set_id(job.id());
  st = FromGrpcStatus(jobs.GetJob(&get_ctx, get, &s.job));
  if (!st.ok()) return st;
  if (s.job.state() != v1::SUCCEEDED) {
    return absl::InternalError(absl::StrCat(job.id(), " ", v1::JobState_Name(s.job.state()), ": ",
                                            s.job.failure_reason()));
  }
  if (s.steps == 0) return absl::InvalidArgumentError("no steps after the warm-up");
  for (double* v : {&s.wall, &s.worker, &s.compute, &s.allreduce, &s.update}) *v /= s.steps;
  s.samples_per_sec = spec.global_batch_size() * 1000.0 / s.wall;
  return s;
}

}  // namespace lockstep
