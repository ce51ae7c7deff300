#include "services/coordinator/job_runner.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/dataset.h"
#include "core/status_macros.h"
#include "services/common/auth.h"
#include "services/common/job_log.h"
#include "services/coordinator/logical_dispatch.h"

namespace lockstep {
namespace {

// A health check after a failure, to tell the dead worker from its peers.
constexpr absl::Duration kAliveTimeout = absl::Seconds(2);

// Runs f(r) for every rank on its own thread and waits for all.
template <typename F>
void ForEachRank(int n, F f) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&f, r] { f(r); });
  for (auto& t : threads) t.join();
}
}  // namespace

JobRunner::JobRunner(std::string job_id, v1::JobSpec spec, std::vector<PoolWorker> workers,
                     WorkerClientFactory* factory, const CoordinatorOptions& options, JobSink* sink,
                     WorkerSupply* supply, bool resume)
    : job_id_(std::move(job_id)),
      spec_(std::move(spec)),
      options_(options),
      factory_(factory),
      sink_(sink),
      supply_(supply),
      resume_(resume),
      folder_(options.checkpoint_dir, options.snapshot_dir),
      snapshots_(options.snapshot_dir.empty() ? "" : options.snapshot_dir + "/" + job_id_,
                 static_cast<int>(spec_.recovery().snapshots_kept())),
      attempt_(std::make_shared<CancelToken>()) {
  Connect(std::move(workers));
  cancel_attempt_ = cancel_.OnCancel([this] { attempt()->Cancel(cancel_.status()); });
}

JobRunner::~JobRunner() = default;

void JobRunner::Connect(std::vector<PoolWorker> workers) {
  clients_.clear();
  for (size_t r = 0; r < workers.size(); ++r) {
    const PoolWorker& w = workers[r];
    clients_.push_back(factory_->Connect(w.address));
    LogJob(spdlog::level::info, {job_id_, w.id, static_cast<int>(r)},
           absl::StrCat("rank ", r, " of ", workers.size(), ": worker ",
                        w.name.empty() ? w.id : w.name, " at ", w.address));
  }
  absl::MutexLock lock(&attempt_mu_);
  workers_ = std::move(workers);
}

std::shared_ptr<CancelToken> JobRunner::attempt() {
  absl::MutexLock lock(&attempt_mu_);
  return attempt_;
}

absl::Status JobRunner::Drained(absl::string_view from) {
  std::string why;
  {
    absl::MutexLock lock(&attempt_mu_);
    why = drain_why_;
  }
  if (!why.empty()) {
    return absl::UnavailableError(
        absl::StrCat(why, ": the job continues from ", from, " when workers are free"));
  }
  return absl::UnavailableError(absl::StrCat(
      "the coordinator is stopping (drain): the job continues from ", from, " once it is back"));
}

void JobRunner::Drain(std::string why) {
  bool now;
  {
    absl::MutexLock lock(&attempt_mu_);
    draining_ = true;
    drain_why_ = std::move(why);
    now = !stepping_;
  }
  // Preparing, or between attempts: nothing to finish first.
  if (now) cancel_.Cancel(Drained("its latest snapshot"));
}

bool JobRunner::draining() {
  absl::MutexLock lock(&attempt_mu_);
  return draining_;
}

absl::Status JobRunner::SetStepping(bool stepping) {
  bool drained;
  {
    absl::MutexLock lock(&attempt_mu_);
    stepping_ = stepping;
    drained = stepping && draining_;
  }
  return drained ? Drained("its latest snapshot") : absl::OkStatus();
}

void JobRunner::LoseWorker(const std::string& worker_id, const absl::Status& why) {
  absl::MutexLock lock(&attempt_mu_);
  for (const PoolWorker& w : workers_) {
    if (w.id == worker_id) attempt_->Cancel(why);
  }
}

absl::Status JobRunner::WorkerError(int rank, const absl::Status& st) const {
  const PoolWorker& w = workers_[rank];
  if (!absl::IsCancelled(st)) {
    LogJob(spdlog::level::err, {job_id_, w.id, rank}, std::string(st.message()));
  }
  return absl::Status(st.code(), absl::StrCat("worker ", w.id, " (", w.address, ", rank ", rank,
                                              "): ", st.message()));
}

std::vector<bool> JobRunner::Probe() {
  const int n = static_cast<int>(clients_.size());
  std::vector<char> alive(n);
  ForEachRank(n, [&](int r) { alive[r] = clients_[r]->Alive(kAliveTimeout); });
  return {alive.begin(), alive.end()};
}

absl::Status JobRunner::NameTheDead(absl::Status st, const std::vector<bool>& alive,
                                    JobOutcome* outcome) {
  // A lost worker makes its peers' collectives fail too: name the dead.
  outcome->unreachable.clear();
  for (size_t r = 0; r < alive.size(); ++r) {
    if (alive[r]) continue;
    if (outcome->unreachable.empty()) {
      // The dead worker's loss is the failure; an error its peers saw first (their
      // all-reduce timed out, their connection to it reset) followed from it.
      const int dead = static_cast<int>(r);
      std::string what = "is unreachable";
      if (blamed_ >= 0 && blamed_ != dead) {
        const absl::Status own = dead < static_cast<int>(stream_errors_.size())
                                     ? stream_errors_[dead]
                                     : absl::OkStatus();
        absl::StrAppend(&what, " (", own.ok() ? "no answer" : own.message(),
                        "); its peers failed after it: ", st.message());
      } else {
        absl::StrAppend(&what, ": ", st.message());
      }
      st = WorkerError(dead, absl::UnavailableError(what));
    }
    outcome->unreachable.push_back(workers_[r].id);
  }
  return st;
}

absl::Status JobRunner::Run(JobOutcome* outcome) {
  absl::Status st = Begin();
  std::vector<std::string> recovered_from;  // the failures recovered from, in order
  while (st.ok()) {
    st = Attempt(outcome);
    SetStepping(false).IgnoreError();
    const bool resizing =
        resize_.has_value() && resize_->stopped && cancel_.status().ok() && !draining() && !st.ok();
    if (resizing && !resize_->recover) {  // workers join or leave at a boundary (job_resize.cc)
      Resize(outcome);
      st = absl::OkStatus();
      continue;
    }
    // Workers released from a job that cannot go on without them: it recovers from the
    // snapshot it just took, on replacements; nobody was lost.
    const bool planned = resizing && resize_->recover;
    if (planned) {
      absl::MutexLock lock(&attempt_mu_);
      for (const std::string& id : resize_->leaving) releasing_.erase(id);
    }
    resize_.reset();
    std::vector<bool> alive(clients_.size(), true);
    if (!cancel_.status().ok()) {
      st = cancel_.status();  // aborted: say why, and waste no time probing
    } else if (!st.ok() && draining()) {
      // Stopped for a drain (or failed meanwhile): the job continues later; no probing.
    } else if (planned) {
      outcome->unreachable.clear();
    } else if (absl::Status lost = attempt()->status(); !st.ok() && !lost.ok()) {
      st = lost;  // LoseWorker's reason, which names the worker; its calls only say CANCELLED
      alive = Probe();
      NameTheDead(st, alive, outcome).IgnoreError();  // only outcome->unreachable: `st` says it
    } else if (!st.ok()) {
      alive = Probe();
      st = NameTheDead(st, alive, outcome);
    }
    // An elastic job goes on with its survivors, nothing released (job_resize.cc).
    if (!st.ok() && !planned && cancel_.status().ok() && !draining() &&
        Shrink(st, alive, outcome)) {
      st = absl::OkStatus();
      continue;
    }
    if (start_.kept && fallback_.has_value()) {  // a resize that failed: the snapshot's
      start_ = *std::move(fallback_);
      fallback_.reset();
      ahead_.clear();  // replayed from the snapshot instead
    }
    // The survivors at once: a released worker aborts its collective.
    ReleaseAll(st.ok() ? "job finished" : std::string(st.message()), alive);
    if (st.ok() || !cancel_.status().ok() || draining()) break;
    const std::string failure(st.message());
    st = Recover(st, outcome, planned);
    if (st.ok()) recovered_from.push_back(failure);
  }
  // Sticky: an abort that arrived before the job's end wins, whatever came after it.
  if (absl::Status why = cancel_.status(); !why.ok()) return why;
  if (st.ok()) {
    // The checkpoint holds the end; a pending one's state is in the newest snapshot.
    if (outcome->pending == nullptr) snapshots_.Clear();
  } else if (!recovered_from.empty()) {
    // A failed recovery's own failure is in `st` already ("...; recovery failed: ...").
    st = absl::Status(st.code(),
                      absl::StrCat(st.message(), " (after ", recovered_from.size(),
                                   " recoveries from: ", absl::StrJoin(recovered_from, "; "), ")"));
  }
  return st;
}

absl::Status JobRunner::Recover(const absl::Status& failure, JobOutcome* outcome, bool planned) {
  const absl::StatusCode code = failure.code();
  const bool worker_lost = !outcome->unreachable.empty() ||
                           code == absl::StatusCode::kUnavailable ||
                           code == absl::StatusCode::kDeadlineExceeded ||
                           code == absl::StatusCode::kAborted || !audit_lost_.empty();
  // A liar gets no more work whether or not the job goes on.
  for (const PoolWorker& w : audit_liars_) {
    outcome->quarantined.push_back(w.id);
    if (supply_ != nullptr) supply_->Quarantine(w, std::string(failure.message()));
  }
  std::vector<std::string> lost = outcome->unreachable;
  for (const PoolWorker& w : audit_lost_) {
    if (std::find(lost.begin(), lost.end(), w.id) == lost.end()) lost.push_back(w.id);
  }
  audit_liars_.clear();
  if (supply_ == nullptr || !(worker_lost || planned) ||
      (!planned && outcome->recoveries >= static_cast<int>(spec_.recovery().max_restarts()))) {
    return failure;
  }
  ++outcome->recoveries;
  absl::StatusOr<std::vector<PoolWorker>> workers = supply_->Replace(
      lost, failure, absl::Seconds(spec_.recovery().recovery_timeout_seconds()), cancel_);
  if (!workers.ok()) {
    if (absl::IsCancelled(workers.status()) || draining()) return workers.status();
    return absl::Status(
        failure.code(),
        absl::StrCat(failure.message(), "; recovery failed: ", workers.status().message()));
  }
  Connect(std::move(workers).value());
  ++attempt_number_;
  {
    absl::MutexLock lock(&attempt_mu_);
    attempt_ = std::make_shared<CancelToken>();
  }
  if (!cancel_.status().ok()) attempt()->Cancel(cancel_.status());  // raced with an Abort
  return absl::OkStatus();
}

absl::Status JobRunner::Attempt(JobOutcome* outcome) {
  blamed_ = -1;
  // A resize's workers hold the state at its step even if their Prepare fails.
  done_ = start_.kept ? start_.step : -1;
  stream_errors_.clear();
  audit_lost_.clear();
  audit_liars_.clear();
  int64_t num_train = 0, num_test = 0;
  RETURN_IF_ERROR(Prepare(&num_train, &num_test));
  // V keys and shards per step: the workers' count, or the job's logical replicas.
  TrainingPlan plan(spec_.seed(), spec_.dropout_seed(), setup_->impl, num_train,
                    static_cast<int>(spec_.global_batch_size()),
                    logical() ? LogicalWorld(spec_) : static_cast<int>(workers_.size()));
  for (int64_t s = 0; s < start_.step; ++s) plan.Next();  // where the start's state stands
  RETURN_IF_ERROR(CheckStartKeys(plan));
  const int64_t total = TotalSteps(spec_, num_train);
  RETURN_IF_ERROR(ReportAhead(total, plan.steps_per_epoch()));
  RETURN_IF_ERROR(SetStepping(true));
  RETURN_IF_ERROR(StepLoop(plan, total, num_test, outcome));
  ASSIGN_OR_RETURN(v1::EvalResult final_eval,
                   Evaluate(num_test, total, (total - 1) / plan.steps_per_epoch()));
  sink_->OnEval(final_eval);

  if (checkpoint_path_.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(SaveCheckpoint(checkpoint_path_, outcome->param_checksum, plan, outcome));
  if (outcome->pending == nullptr) {
    outcome->checkpoint_path = std::filesystem::absolute(checkpoint_path_).string();
  }
  return absl::OkStatus();
}

void JobRunner::ReleaseAll(const std::string& reason, const std::vector<bool>& alive) {
  ForEachRank(static_cast<int>(clients_.size()), [&](int r) {
    if (alive[r]) clients_[r]->Release(job_id_, reason, options_.release_timeout).IgnoreError();
  });
}

absl::Status JobRunner::Prepare(int64_t* num_train, int64_t* num_test) {
  ASSIGN_OR_RETURN(std::vector<PrepareResult> resp, PrepareRanks());
  for (int r = 0; r < static_cast<int>(resp.size()); ++r) {
    if (resp[r].train_examples != resp[0].train_examples ||
        resp[r].test_examples != resp[0].test_examples) {
      return WorkerError(
          r, absl::FailedPreconditionError(absl::StrCat(
                 "its dataset at ", DatasetLocation(spec_.dataset()), " has ",
                 resp[r].train_examples, "/", resp[r].test_examples, " examples; rank 0's has ",
                 resp[0].train_examples, "/", resp[0].test_examples)));
    }
  }
  *num_train = resp[0].train_examples;
  *num_test = resp[0].test_examples;
  if (*num_train < spec_.global_batch_size()) {
    return absl::InvalidArgumentError(absl::StrCat("global_batch_size: ", spec_.global_batch_size(),
                                                   " exceeds the ", *num_train,
                                                   " training examples"));
  }
  // Submit assumed an MNIST-sized dataset; now its size is known.
  RETURN_IF_ERROR(CheckMemoryBudget(spec_, options_.memory, {*num_train, *num_test}));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<PrepareResult>> JobRunner::PrepareRanks() {
  ASSIGN_OR_RETURN(std::shared_ptr<const SharedState> state, StartState());
  // The params, then (after the slots) the batch_stats; none where the workers keep theirs.
  uint64_t checksum = 0;
  if (!state->bytes.empty()) {
    const auto* floats = reinterpret_cast<const float*>(state->bytes.data());
    checksum = ParamChecksum(
        {floats, state->header.param_count},
        {floats + state->header.param_count * (1 + uint64_t{state->header.slot_count}),
         state->header.stats_count});
  }
  // A resize: the ranks that keep their state get its header only.
  auto header_only = std::make_shared<SharedState>();
  header_only->header = state->header;
  const std::shared_ptr<CancelToken> cancel = attempt();
  const int n = static_cast<int>(workers_.size());
  std::vector<absl::StatusOr<PrepareResult>> resp(n, absl::UnknownError("not run"));
  // A namespace per attempt: a recovery's ranks never meet the lost attempt's keys. Its
  // random part is known only to the ranks (it travels in Prepare, over mutual TLS), so
  // no other registry client can read or pre-write the job's keys.
  const std::string prefix =
      absl::StrCat("jobs/", job_id_, "/", attempt_number_, "-", RandomHex(16), "/");
  sink_->OnRendezvous(prefix, workers_);
  ForEachRank(n, [&](int r) {
    JobAssignment job;
    job.job_id = job_id_;
    job.replica = {spec_, r, n, options_.collective_timeout};
    if (logical()) {
      const ReplicaRange range = RangeOf(r, n, LogicalWorld(spec_));
      job.replica.logical_replicas = LogicalWorld(spec_);
      job.replica.logical_first = range.first;
      job.replica.logical_count = range.count;
    }
    job.rendezvous_prefix = prefix;
    job.keep_state = start_.kept && r < kept_ranks_;
    resp[r] = clients_[r]->Prepare(job, job.keep_state ? header_only : state, *cancel,
                                   options_.prepare_timeout);
    if (start_.kept && !resp[r].ok() && !absl::IsCancelled(resp[r].status())) {
      // A resize that cannot be: the others stop waiting for this rank in the rendezvous.
      cancel->Cancel(absl::AbortedError(absl::StrCat(
          "rank ", r, " could not continue the resize: ", resp[r].status().message())));
    }
  });
  if (start_.kept) {
    RETURN_IF_ERROR(CheckKeptStates(resp));
    ASSIGN_OR_RETURN(const bool again, CatchUp(resp));
    if (again) return PrepareRanks();  // every rank at the step some were at: it agrees now
  }
  std::vector<PrepareResult> out;
  for (int r = 0; r < n; ++r) {
    if (!resp[r].ok()) return WorkerError(r, resp[r].status());
    if (!start_.kept && resp[r]->param_checksum != checksum) {
      return WorkerError(r, absl::DataLossError("replicated params arrived corrupted"));
    }
    out.push_back(*std::move(resp[r]));
  }
  return out;
}

absl::StatusOr<v1::EvalResult> JobRunner::Evaluate(int64_t num_test, int64_t step, int64_t epoch) {
  const std::shared_ptr<CancelToken> cancel = attempt();
  const int n = static_cast<int>(workers_.size());
  // Logical replicas: one part of the test split per replica, added in replica order.
  const int v = logical() ? LogicalWorld(spec_) : n;
  std::vector<absl::StatusOr<EvalSums>> resp(v, absl::UnknownError("not run"));
  ForEachRank(n, [&](int r) {
    const ReplicaRange range = logical() ? RangeOf(r, n, v) : ReplicaRange{r, 1};
    for (int p = range.first; p < range.first + range.count; ++p) {
      const EvalPart part = EvalPartOf(num_test, p, v);
      resp[p] = clients_[r]->Evaluate(job_id_, part.begin, part.end, *cancel,
                                      options_.rpc_timeout + absl::Seconds(num_test / 100));
    }
  });
  std::vector<EvalSums> parts;
  for (int p = 0; p < v; ++p) {
    if (!resp[p].ok()) return WorkerError(OwnerOf(p, n, v), resp[p].status());
    parts.push_back(*resp[p]);
  }
  const EvalSums sum = AddInOrder(parts);
  v1::EvalResult out;
  out.set_step(step);
  out.set_epoch(epoch);
  out.set_examples(sum.count);
  out.set_test_loss(sum.count > 0 ? sum.loss_sum / sum.count : 0);
  out.set_test_accuracy(sum.predictions > 0 ? static_cast<double>(sum.correct) / sum.predictions
                                            : 0);
  return out;
}

}  // namespace lockstep
