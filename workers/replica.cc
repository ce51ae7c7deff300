#include "workers/replica.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/plan.h"
#include "core/status_macros.h"

namespace lockstep {

struct Replica::Job {
  std::string id;
  int eval_batch = 0;
  std::unique_ptr<Collective> collective;
  std::unique_ptr<StepExecutor> exec;
  Data* data = nullptr;
};

Replica::Replica(Backend* backend, CollectiveFactory* collectives)
    : backend_(backend), collectives_(collectives) {}

Replica::~Replica() {
  absl::MutexLock lock(&mu_);
  job_.reset();
}

absl::StatusOr<Replica::Data*> Replica::LoadData(const std::string& path) {
  auto it = data_.find(path);
  if (it != data_.end()) {
    it->second->last_use = ++data_uses_;
    return it->second.get();
  }
  // Called with no job held, so no dataset is in use.
  while (data_.size() >= kMaxDatasets) {
    auto lru = data_.begin();
    for (auto i = data_.begin(); i != data_.end(); ++i) {
      if (i->second->last_use < lru->second->last_use) lru = i;
    }
    data_.erase(lru);
  }
  auto d = std::make_unique<Data>();
  d->last_use = ++data_uses_;
  ASSIGN_OR_RETURN(d->train, LoadIdxDataset(path, Split::kTrain));
  ASSIGN_OR_RETURN(d->test, LoadIdxDataset(path, Split::kTest));
  ASSIGN_OR_RETURN(d->train_d, UploadDataset(*backend_, d->train));
  ASSIGN_OR_RETURN(d->test_d, UploadDataset(*backend_, d->test));
  Data* out = d.get();
  data_[path] = std::move(d);
  return out;
}

void Replica::DropIfReleased() {
  absl::MutexLock lock(&release_mu_);
  if (job_ && job_->id == released_) {
    job_.reset();
    released_.clear();
  }
}

void Replica::CheckDevice() {
  absl::Status st = backend_->Synchronize();
  if (st.ok()) return;
  absl::MutexLock lock(&device_mu_);
  if (device_error_.ok()) device_error_ = std::move(st);
}

absl::Status Replica::device_error() {
  absl::MutexLock lock(&device_mu_);
  return device_error_;
}

absl::StatusOr<Replica::Job*> Replica::Current(const std::string& job_id) {
  DropIfReleased();
  if (!job_ || job_->id != job_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is not prepared on this worker",
                     job_ ? absl::StrCat(" (it holds ", job_->id, ")") : std::string()));
  }
  return job_.get();
}

absl::StatusOr<v1::PrepareResponse> Replica::Prepare(const v1::PrepareHeader& h,
                                                     const std::string& state) {
  absl::MutexLock lock(&mu_);
  DropIfReleased();
  if (absl::Status st = device_error(); !st.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(backend_->Name(), " is unusable after an earlier error: ", st.message()));
  }
  if (job_ && job_->id == h.job_id()) {
    return absl::AlreadyExistsError(absl::StrCat("job ", h.job_id(), " is already prepared"));
  }
  if (job_) {
    // The coordinator is the single writer of job state: if it hands this worker a new
    // job, the old one is over (e.g. the coordinator restarted without releasing it).
    spdlog::warn("dropping job {} for job {}", job_->id, h.job_id());
    job_.reset();
  }
  ASSIGN_OR_RETURN(Model model, Model::FromSpec(h.spec().model()));
  ASSIGN_OR_RETURN(Optimizer optimizer, Optimizer::FromSpec(h.spec().optimizer()));
  ASSIGN_OR_RETURN(rng::Impl impl, rng::ParseImpl(h.spec().rng_impl()));
  const uint64_t n = model.layout().total();
  if (h.param_count() != n || h.slot_count() != optimizer.slots().size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train state has ", h.param_count(), " params and ", h.slot_count(),
        " slots; the model needs ", n, " params and ", optimizer.slots().size(), " slots"));
  }
  ASSIGN_OR_RETURN(TrainState ts, StateFromBytes(state, h.state_step(), n, h.slot_count()));
  if (h.world_size() <= 0 || h.rank() < 0 || h.rank() >= h.world_size() ||
      h.spec().global_batch_size() % h.world_size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", h.rank(), " of ", h.world_size(),
                                                   " with global batch ",
                                                   h.spec().global_batch_size()));
  }
  if (h.spec().eval().batch_size() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval.batch_size: ", h.spec().eval().batch_size(), " is not positive"));
  }
  RETURN_IF_ERROR(backend_->SetTf32(h.spec().cuda().tf32()));
  ASSIGN_OR_RETURN(Data * data, LoadData(h.spec().dataset().path()));
  auto job = std::make_unique<Job>();
  job->id = h.job_id();
  job->eval_batch = static_cast<int>(h.spec().eval().batch_size());
  job->data = data;
  if (h.world_size() > 1) {
    ASSIGN_OR_RETURN(job->collective,
                     collectives_->Create(h.rank(), h.world_size(), h.rendezvous_prefix(),
                                          absl::Milliseconds(h.collective_timeout_ms()), backend_));
  }
  CollectiveOptions copts;
  copts.timeout = absl::Milliseconds(h.collective_timeout_ms());
  const int local_batch = static_cast<int>(h.spec().global_batch_size() / h.world_size());
  ASSIGN_OR_RETURN(job->exec, StepExecutor::Create(model, optimizer, impl, local_batch, backend_,
                                                   job->collective.get(), copts,
                                                   !h.spec().cuda().disable_graphs()));
  RETURN_IF_ERROR(job->exec->SetState(ts));
  v1::PrepareResponse resp;
  resp.set_train_examples(data->train.size);
  resp.set_test_examples(data->test.size);
  resp.set_param_checksum(ParamChecksum(ts.params));
  job_ = std::move(job);
  return resp;
}

absl::StatusOr<v1::StepResponse> Replica::Step(const v1::StepRequest& req) {
  v1::StepResponse resp;
  resp.set_step(req.step());
  if (req.empty()) return resp;  // the control-plane benchmark's no-op step
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Job * job, Current(req.job_id()));
  if (req.step() != job->exec->step()) {
    return absl::AbortedError(absl::StrCat(
        "step ", req.step(), " is out of order: the replica is at step ", job->exec->step()));
  }
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<StepMetrics> m = job->exec->Step(
      job->data->train_d, {req.indices().data(), static_cast<size_t>(req.indices_size())},
      {req.key0(), req.key1()});
  if (!m.ok()) {
    job_.reset();  // a failed step leaves the replica and collective unusable
    CheckDevice();
    return m.status();
  }
  resp.set_loss(m->loss);
  resp.set_accuracy(m->accuracy);
  const StepExecutor::Timings& t = job->exec->last_timings();
  resp.set_compute_ms(t.compute * 1000);
  resp.set_allreduce_ms(t.allreduce * 1000);
  resp.set_update_ms(t.update * 1000);
  if (req.want_checksum()) {
    ASSIGN_OR_RETURN(TrainState s, job->exec->GetState());
    resp.set_param_checksum(ParamChecksum(s.params));
  }
  resp.set_step_ms(
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  DropIfReleased();
  return resp;
}

absl::StatusOr<v1::EvaluateResponse> Replica::Evaluate(const v1::EvaluateRequest& req) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Job * job, Current(req.job_id()));
  absl::StatusOr<EvalMetrics> m =
      job->exec->Evaluate(job->data->test_d, job->eval_batch, req.begin(), req.end());
  if (!m.ok()) {
    CheckDevice();
    return m.status();
  }
  v1::EvaluateResponse resp;
  resp.set_loss_sum(m->loss * m->count);
  resp.set_correct(std::llround(m->accuracy * m->count));
  resp.set_count(m->count);
  return resp;
}

absl::StatusOr<TrainState> Replica::FetchState(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Job * job, Current(job_id));
  return job->exec->GetState();
}

absl::Status Replica::Release(const std::string& job_id) {
  {
    absl::MutexLock lock(&release_mu_);
    released_ = job_id;
  }
  if (mu_.TryLock()) {  // otherwise the running command drops the job when it ends
    DropIfReleased();
    mu_.Unlock();
  }
  return absl::OkStatus();
}

}  // namespace lockstep
