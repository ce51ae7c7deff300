// JobSlot: a worker's one job, without gRPC. Contract: job_slot.h.
#include "services/worker/job_slot.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "core/spec/spec.h"
#include "core/status_macros.h"
#include "services/common/observability/job_log.h"

namespace lockstep {
namespace {

// A state held in memory, as one chunk (an elastic resize's kept state).
class BytesSource final : public StateSource {
 public:
  explicit BytesSource(const std::string& bytes) : bytes_(bytes) {}
  absl::StatusOr<bool> Next(std::string* chunk) override {
    if (done_) return false;
    done_ = true;
    *chunk = bytes_;
    return true;
  }

 private:
  const std::string& bytes_;
  bool done_ = false;
};

}  // namespace

JobSlot::JobSlot(const BackendSource* backends, DatasetCache* data, CollectiveFactory* collectives,
                 WorkerMetrics* metrics)
    : backends_(backends), data_(data), collectives_(collectives), metrics_(metrics) {}

JobSlot::~JobSlot() {
  absl::MutexLock run(&run_mu_);
  std::unique_ptr<Job> dropped;
  {
    absl::MutexLock lock(&mu_);
    dropped = std::move(job_);
  }
  dropped.reset();  // its collective's thread is joined without mu_
}

absl::StatusOr<PrepareResult> JobSlot::Prepare(const JobAssignment& assignment,
                                               const StateHeader& header, StateSource& state) {
  const ReplicaConfig& config = assignment.replica;
  RETURN_IF_ERROR(CheckReplicaConfig(config));
  ASSIGN_OR_RETURN(TrainSetup setup, SetupFromSpec(config.spec));
  RETURN_IF_ERROR(header.Bytes(kMaxStateBytes).status());
  const size_t params = setup.model.layout().total(), slots = setup.optimizer.slots().size();
  const size_t stats = setup.model.stats_layout().total();
  if (header.param_count != params || header.slot_count != slots || header.stats_count != stats) {
    return absl::InvalidArgumentError(
        absl::StrCat("train state has ", header.param_count, " params, ", header.slot_count,
                     " optimizer slots and ", header.stats_count, " batch stats; the model needs ",
                     params, " params, ", slots, " slots and ", stats, " batch stats"));
  }
  if (absl::Status st = device_error(); !st.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(backends_->device(), " is unusable after an earlier error: ", st.message()));
  }
  Job* job;
  {
    // The coordinator is the single writer of job state: if it hands this worker a job,
    // the one held is over, even the same job (its next attempt, after a recovery or a
    // coordinator restart).
    absl::MutexLock lock(&mu_);
    for (Job* old : {job_.get(), next_.get()}) {
      if (old == nullptr) continue;
      if (assignment.keep_state && old == job_.get() && old->id == assignment.job_id) {
        old->handing_over = true;  // a step still running ends (aborted), the state stays
      }
      // The same job's next attempt (an elastic resize, a recovery) is routine; another
      // job in its place means the coordinator moved on without releasing this one.
      LogJob(old->id == assignment.job_id ? spdlog::level::info : spdlog::level::warn, {old->id},
             old->id == assignment.job_id ? "handed over to its next attempt"
                                          : "dropped for job " + assignment.job_id);
      old->cancel.Cancel(absl::CancelledError(absl::StrCat("replaced by ", assignment.job_id)));
    }
    // From now on a Release of the new job finds it, while it waits for the old job's
    // command to end.
    next_ = std::make_unique<Job>();
    next_->id = assignment.job_id;
    job = next_.get();
  }
  absl::MutexLock run(&run_mu_);
  std::unique_ptr<Job> previous;  // destroyed without mu_: it joins threads
  {
    absl::MutexLock lock(&mu_);
    if (next_.get() != job) {  // a later Prepare replaced it
      return absl::CancelledError(absl::StrCat("job ", assignment.job_id, " was replaced"));
    }
    previous = std::move(job_);
    job_ = std::move(next_);
  }
  absl::StatusOr<PrepareResult> result;
  if (assignment.keep_state) {
    // Its state in memory; its replica and collective go once the new ones are ready
    // (every survivor's Prepare aborted its own collective first, so no peer still waits
    // on this one's). If the resize fails (a peer lost meanwhile), the job keeps it, for
    // the next resize.
    absl::StatusOr<Kept> kept = KeptState(previous.get(), assignment.job_id, header);
    if (!kept.ok()) {
      result = kept.status();
      previous.reset();
    } else {
      BytesSource source(kept->bytes);
      result = Load(*job, assignment, std::move(setup), kept->header, source);
      if (result.ok()) {
        // Kept again: should this resize fail too, the next one reports them as well.
        job->replica->KeepCompleted(kept->ahead);
        result->ahead = std::move(kept->ahead);
        previous.reset();
      }
    }
  } else {
    previous.reset();
    result = Load(*job, assignment, std::move(setup), header, state);
  }
  if (job->cancel.cancelled()) result = job->cancel.status();  // released meanwhile
  Finish(/*drop_job=*/!result.ok());
  if (previous != nullptr) {  // a resize that failed: the state it held stays
    previous->broken = true;
    absl::MutexLock lock(&mu_);
    if (!job_ && !next_) {
      job_ = std::move(previous);
    }
  }
  return result;
}

absl::StatusOr<JobSlot::Kept> JobSlot::KeptState(const Job* previous, const std::string& job_id,
                                                 const StateHeader& header) {
  if (previous == nullptr || previous->id != job_id || previous->replica == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("keep_state: this worker holds no state of job ", job_id));
  }
  Replica& replica = *previous->replica;
  const StateHeader held = replica.state_header();
  auto refuse = [&](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat("keep_state: this worker holds job ", job_id, " at step ", held.step,
                     "; the coordinator continues from step ", header.step, why));
  };
  if (held.step < header.step || held.param_count != header.param_count ||
      held.slot_count != header.slot_count || held.stats_count != header.stats_count) {
    return refuse("");
  }
  Kept kept;
  kept.header = held;
  // Past it: the peer lost in the step after the coordinator's last finished it with
  // this worker, but its answer never came.
  absl::StatusOr<std::vector<CompletedStep>> ahead = replica.CompletedAfter(header.step);
  if (!ahead.ok()) return refuse(absl::StrCat(" (", ahead.status().message(), ")"));
  kept.ahead = *std::move(ahead);
  ASSIGN_OR_RETURN(const uint64_t total, held.Bytes(kMaxStateBytes));
  kept.bytes.assign(total, '\0');
  RETURN_IF_ERROR(replica.ReadState(0, {kept.bytes.data(), kept.bytes.size()}));
  return kept;
}

absl::StatusOr<PrepareResult> JobSlot::Load(Job& job, const JobAssignment& assignment,
                                            TrainSetup setup, const StateHeader& header,
                                            StateSource& state) {
  const ReplicaConfig& config = assignment.replica;
  ASSIGN_OR_RETURN(std::shared_ptr<Backend> backend, backends_->ForJob(config.spec));
  RETURN_IF_ERROR(job.cancel.status());
  ASSIGN_OR_RETURN(JobData data, data_->ForJob(config.spec.dataset()));
  RETURN_IF_ERROR(job.cancel.status());
  std::unique_ptr<Collective> collective;
  if (config.world_size > 1) {
    if (collectives_ == nullptr) {
      return absl::FailedPreconditionError("this worker runs single-worker jobs only");
    }
    ASSIGN_OR_RETURN(collective, collectives_->Create(
                                     config.rank, config.world_size, assignment.rendezvous_prefix,
                                     config.collective_timeout, backend.get(), job.cancel));
    if (metrics_ != nullptr) collective = metrics_->Metered(std::move(collective));
  }
  RETURN_IF_ERROR(job.cancel.status());
  ASSIGN_OR_RETURN(std::unique_ptr<Replica> replica,
                   Replica::Create(config, std::move(setup), std::move(backend), std::move(data),
                                   std::move(collective)));
  ASSIGN_OR_RETURN(const uint64_t total, header.Bytes(kMaxStateBytes));
  uint64_t received = 0;
  std::string chunk;
  while (true) {
    ASSIGN_OR_RETURN(bool more, state.Next(&chunk));
    if (!more) break;
    RETURN_IF_ERROR(job.cancel.status());
    if (chunk.size() > total - received) {
      return absl::DataLossError(absl::StrCat("train state: more than the ", total,
                                              " bytes its header announced arrived"));
    }
    RETURN_IF_ERROR(replica->WriteState(received, chunk));
    received += chunk.size();
  }
  if (received != total) {
    return absl::DataLossError(
        absl::StrCat("train state: ", received, " of the ", total, " bytes announced arrived"));
  }
  replica->set_step(header.step);
  PrepareResult result;
  result.step = header.step;
  ASSIGN_OR_RETURN(result.param_checksum, replica->ParamChecksum());
  result.train_examples = replica->train_examples();
  result.test_examples = replica->test_examples();
  absl::MutexLock lock(&mu_);
  if (fault_) replica->set_gradient_fault(fault_);
  if (statistics_fault_) replica->set_statistics_fault(statistics_fault_);
  // Cancelling ends what a command may wait on: the peers, the dataset's reads.
  job.abort_waits = job.cancel.OnCancel([r = replica.get(), &job] {
    if (Collective* c = r->collective()) c->Abort(job.cancel.status());
    r->AbortData(job.cancel.status());
  });
  job.replica = std::move(replica);
  return result;
}

void JobSlot::Prefetch(const std::string& job_id, const StepCommand& command) {
  absl::MutexLock lock(&mu_);  // the replica stays while mu_ is held (Finish, Release)
  if (job_ && job_->id == job_id && job_->replica && !job_->broken && !job_->cancel.cancelled()) {
    job_->replica->Prefetch(command);
  }
}

absl::StatusOr<Replica*> JobSlot::Current(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  if (job_ && job_->id == job_id && job_->broken) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, "'s last step failed on this worker: prepare it again to continue"));
  }
  if (!job_ || job_->id != job_id || !job_->replica || job_->cancel.cancelled()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is not prepared on this worker",
        job_ && job_->id != job_id ? absl::StrCat(" (it holds ", job_->id, ")") : std::string()));
  }
  return job_->replica.get();
}

void JobSlot::Finish(bool drop_job) {
  std::unique_ptr<Job> dropped;  // destroyed after mu_ is released: it joins threads
  absl::MutexLock lock(&mu_);
  if (job_ && (drop_job || (job_->cancel.cancelled() && !job_->handing_over))) {
    dropped = std::move(job_);
  }
}

void JobSlot::CheckDevice(Backend& backend) {
  absl::Status st = backend.Synchronize();
  if (st.ok()) return;
  absl::MutexLock lock(&mu_);
  if (device_error_.ok()) device_error_ = std::move(st);
}

void JobSlot::SetGradientFaultForTesting(StepExecutor::GradientFault fault) {
  absl::MutexLock lock(&mu_);
  fault_ = std::move(fault);
}

void JobSlot::SetStatisticsFaultForTesting(StepExecutor::GradientFault fault) {
  absl::MutexLock lock(&mu_);
  statistics_fault_ = std::move(fault);
}

bool JobSlot::holds_job() {
  absl::MutexLock lock(&mu_);
  return job_ != nullptr || next_ != nullptr;
}

absl::Status JobSlot::device_error() {
  absl::MutexLock lock(&mu_);
  return device_error_;
}

absl::StatusOr<StepResult> JobSlot::Step(const std::string& job_id, const StepCommand& command) {
  absl::MutexLock run(&run_mu_);
  ASSIGN_OR_RETURN(Replica * replica, Current(job_id));
  absl::StatusOr<StepResult> result = replica->Step(command);
  if (result.ok() && metrics_ != nullptr) metrics_->OnStep(*result);
  // A failed step leaves the replica and its collective unusable; a logical-replicas
  // job's state is as it was (the update comes after the last collective): kept for an
  // elastic resize, unless the device failed.
  bool keep = false;
  if (!result.ok()) {
    CheckDevice(replica->backend());
    keep = replica->config().logical_replicas > 0 && device_error().ok();
    absl::MutexLock lock(&mu_);
    if (keep && job_) job_->broken = true;
  }
  Finish(/*drop_job=*/!result.ok() && !keep);
  return result;
}

absl::StatusOr<EvalSums> JobSlot::Evaluate(const std::string& job_id, int64_t begin, int64_t end) {
  absl::MutexLock run(&run_mu_);
  ASSIGN_OR_RETURN(Replica * replica, Current(job_id));
  absl::StatusOr<EvalSums> sums = replica->Evaluate(begin, end);
  if (!sums.ok()) CheckDevice(replica->backend());
  Finish(/*drop_job=*/false);
  return sums;
}

absl::Status JobSlot::FetchState(
    const std::string& job_id, size_t chunk_bytes,
    const std::function<absl::Status(const StateHeader&, std::string_view)>& sink) {
  absl::MutexLock run(&run_mu_);
  ASSIGN_OR_RETURN(Replica * replica, Current(job_id));
  const StateHeader header = replica->state_header();
  ASSIGN_OR_RETURN(const uint64_t total, header.Bytes());
  std::string chunk;
  absl::Status st;
  for (uint64_t off = 0; st.ok() && (off == 0 || off < total); off += chunk.size()) {
    chunk.resize(std::min<uint64_t>(chunk_bytes, total - off));
    st = replica->ReadState(off, {chunk.data(), chunk.size()});
    if (st.ok()) st = sink(header, chunk);
    if (chunk.empty()) break;
  }
  Finish(/*drop_job=*/false);
  return st;
}

void JobSlot::Release(const std::string& job_id) {
  std::unique_ptr<Job> dropped;
  bool idle = false;  // run_mu_ taken: no command runs
  {
    absl::MutexLock lock(&mu_);
    if (next_ && next_->id == job_id) {  // waiting to be prepared: its Prepare will stop
      next_->cancel.Cancel(absl::CancelledError(absl::StrCat("job ", job_id, " was released")));
    }
    if (!job_ || job_->id != job_id) return;
    job_->handing_over = false;  // released: nothing to keep
    job_->cancel.Cancel(absl::CancelledError(absl::StrCat("job ", job_id, " was released")));
    // Otherwise the command running now drops it when it ends (Finish).
    idle = run_mu_.TryLock();
    if (idle) dropped = std::move(job_);
  }
  // Its replica and collective (whose thread is joined) go without mu_, under run_mu_, so
  // that no command starts on the slot meanwhile.
  dropped.reset();
  if (idle) run_mu_.Unlock();
}

}  // namespace lockstep
