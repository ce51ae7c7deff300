#include "bench/job_stats.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "services/common/status.h"

namespace lockstep {

absl::StatusOr<JobStats> RunAndMeasure(v1::JobService::Stub& jobs, const v1::JobSpec& spec,
                                       int warmup) {
  v1::Job job;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    absl::Status st = FromGrpcStatus(jobs.SubmitJob(&ctx, spec, &job));
    if (!st.ok()) return st;
  }
  grpc::ClientContext ctx;
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
