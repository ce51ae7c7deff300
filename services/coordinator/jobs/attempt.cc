// Attempt (attempt.h): connecting, preparing every rank, evaluating, fetching the state,
// and how the attempt ended: a failure probed for the workers that no longer answer.
#include "services/coordinator/jobs/attempt.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/data/dataset.h"
#include "core/status_macros.h"
#include "services/common/observability/job_log.h"
#include "services/common/security/auth.h"
#include "services/coordinator/jobs/logical_dispatch.h"
#include "services/coordinator/jobs/rank_calls.h"

namespace lockstep {
namespace {

// A health check after a failure, to tell the dead worker from its peers.
constexpr absl::Duration kAliveTimeout = absl::Seconds(2);
// How long past it Probe waits for the checks' answers (normally none).
constexpr absl::Duration kAliveMargin = absl::Seconds(5);

// How long past their own timeout Prepare, Evaluate and Release wait for the workers'
// answers (normally none: each call ends by its deadline).
constexpr absl::Duration kAnswerMargin = absl::Seconds(10);

}  // namespace

Attempt::Attempt(Job* job, std::vector<PoolWorker> workers, WorkerClientFactory* factory,
                 JobEvents* events, WorkerSupply* supply)
    : job_(*job),
      events_(*events),
      workers_(std::move(workers)),
      number_(job->NextAttemptNumber()),
      cancel_(events->attempt()),
      alive_(workers_.size(), true),
      factory_(factory),
      supply_(supply) {
  for (size_t r = 0; r < workers_.size(); ++r) {
    const PoolWorker& w = workers_[r];
    clients_.push_back(factory->Connect(w.address));
    LogJob(spdlog::level::info, {job_.id(), w.id, static_cast<int>(r)},
           absl::StrCat("rank ", r, " of ", workers_.size(), ": worker ",
                        w.name.empty() ? w.id : w.name, " at ", w.address));
  }
}

AttemptEnd Attempt::Run() {
  absl::StatusOr<AttemptEnd> end = Execute();
  if (replay_ != nullptr) replay_->Stop();  // its checker back; a pending snapshot is dropped
  events_.SetStepping(false).IgnoreError();
  // Aborted: say why, and waste no time probing. (A drain outside the step loop aborts too.)
  if (absl::Status why = events_.job().status(); !why.ok()) {
    if (events_.draining()) return DrainEnd(why);
    return Cancelled{why};
  }
  if (end.ok()) {
    // A drain that came as the attempt stopped for a resize: the drain's.
    if (std::holds_alternative<ResizeAt>(*end) && events_.draining()) {
      return DrainEnd(events_.Drained("its latest snapshot"));
    }
    return *std::move(end);
  }
  // Stopped for a drain, or failed meanwhile: the job continues later; no probing.
  if (events_.draining()) return DrainEnd(end.status());
  Failed failed;
  alive_ = Probe();
  if (absl::Status lost = cancel_->status(); !lost.ok()) {
    // LoseWorker's reason, which names the worker; its calls only say CANCELLED.
    failed.why = lost;
    NameTheDead(lost, alive_, &failed.lost).IgnoreError();
  } else {
    failed.why = NameTheDead(end.status(), alive_, &failed.lost);
  }
  for (size_t r = 0; r < workers_.size(); ++r) {
    if (alive_[r]) failed.survivors.push_back(workers_[r]);
  }
  failed.completed = done_;
  failed.checksum = done_checksum_step_ == done_ ? done_checksum_ : 0;
  failed.audit_lost = audit_lost_;
  failed.liars = audit_liars_;
  return failed;
}

absl::StatusOr<AttemptEnd> Attempt::Execute() {
  // A resize's workers hold the state at its step even if their Prepare fails.
  done_ = job_.start().kept ? job_.start().step : -1;
  int64_t num_train = 0, num_test = 0;
  RETURN_IF_ERROR(Prepare(&num_train, &num_test));
  const v1::JobSpec& spec = job_.spec();
  // V keys and shards per step: the workers' count, or the job's logical replicas.
  TrainingPlan plan(spec.seed(), spec.dropout_seed(), job_.setup().impl, num_train,
                    static_cast<int>(spec.global_batch_size()),
                    job_.logical() ? LogicalWorld(spec) : static_cast<int>(workers_.size()));
  for (int64_t s = 0; s < job_.start().step; ++s) plan.Next();  // where the start stands
  RETURN_IF_ERROR(job_.CheckStartKeys(plan));
  const int64_t total = TotalSteps(spec, num_train);
  RETURN_IF_ERROR(ReportAhead(total, plan.steps_per_epoch()));
  RETURN_IF_ERROR(events_.SetStepping(true));
  ASSIGN_OR_RETURN(std::optional<AttemptEnd> stop, StepLoop(plan, total, num_test));
  if (stop.has_value()) return *std::move(stop);
  if (replay_ != nullptr) RETURN_IF_ERROR(AuditEnd(total));
  ASSIGN_OR_RETURN(v1::EvalResult final_eval,
                   Evaluate(num_test, total, (total - 1) / plan.steps_per_epoch()));
  job_.sink()->OnEval(final_eval);
  if (job_.checkpoint_path().empty()) return Finished{};
  const uint64_t checksum = job_.outcome().param_checksum;
  ASSIGN_OR_RETURN(
      TrainState state,
      FetchChecked(-1, checksum, "fetched params do not match the replicas' checksum"));
  job_.SaveCheckpoint(std::move(state), checksum, plan);
  return Finished{};
}

AttemptEnd Attempt::DrainEnd(absl::Status why) {
  if (events_.suspending()) return Suspended{std::move(why)};
  return Drained{std::move(why)};
}

void Attempt::ReleaseAll(const std::string& reason) {
  std::vector<int> ranks;
  for (size_t r = 0; r < clients_.size(); ++r) {
    if (alive_[r]) ranks.push_back(static_cast<int>(r));
  }
  ReleaseRanks(ranks, reason);
}

void Attempt::Release(const std::vector<std::string>& ids, const std::string& reason) {
  std::vector<int> ranks;
  for (size_t r = 0; r < workers_.size(); ++r) {
    if (std::find(ids.begin(), ids.end(), workers_[r].id) != ids.end()) {
      ranks.push_back(static_cast<int>(r));
    }
  }
  ReleaseRanks(ranks, reason);
}

void Attempt::ReleaseRanks(const std::vector<int>& ranks, const std::string& reason) {
  const absl::Duration timeout = job_.options().release_timeout;
  RankCalls<absl::Status> calls(static_cast<int>(ranks.size()));
  for (size_t i = 0; i < ranks.size(); ++i) {
    WorkerClient* client = clients_[ranks[i]].get();
    calls.Start(
        static_cast<int>(i),
        [&](RankCalls<absl::Status>::Done done) {
          return client->StartRelease(job_.id(), reason, timeout, std::move(done));
        },
        [client, id = job_.id(), reason, timeout] { return client->Release(id, reason, timeout); });
  }
  calls.Wait(timeout + kAnswerMargin);  // a worker that does not answer is let go anyway
}

absl::Status Attempt::WorkerError(int rank, const absl::Status& st) const {
  const PoolWorker& w = workers_[rank];
  if (!absl::IsCancelled(st)) {
    LogJob(spdlog::level::err, {job_.id(), w.id, rank}, std::string(st.message()));
  }
  return absl::Status(st.code(), absl::StrCat("worker ", w.id, " (", w.address, ", rank ", rank,
                                              "): ", st.message()));
}

std::vector<bool> Attempt::Probe() {
  // Every rank's check at once, answered on the clients' own threads: none of ours waits
  // per rank. The answers outlive this call should one come after the bound below.
  struct Answers {
    absl::Mutex mu;
    std::vector<bool> alive ABSL_GUARDED_BY(mu);
    size_t pending ABSL_GUARDED_BY(mu) = 0;
  };
  auto answers = std::make_shared<Answers>();
  {
    absl::MutexLock lock(&answers->mu);
    answers->alive.assign(clients_.size(), false);
    answers->pending = clients_.size();
  }
  for (size_t r = 0; r < clients_.size(); ++r) {
    clients_[r]->CheckAlive(kAliveTimeout, [answers, r](bool alive) {
      absl::MutexLock lock(&answers->mu);
      answers->alive[r] = alive;
      --answers->pending;
    });
  }
  absl::MutexLock lock(&answers->mu);
  auto all = [&answers]()
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(answers->mu) { return answers->pending == 0; };
  // Each check ends by its deadline; a rank still unanswered a margin later counts as lost.
  answers->mu.AwaitWithTimeout(absl::Condition(&all), kAliveTimeout + kAliveMargin);
  return answers->alive;
}

absl::Status Attempt::NameTheDead(absl::Status st, const std::vector<bool>& alive,
                                  std::vector<std::string>* lost) const {
  // A lost worker makes its peers' collectives fail too: name the dead.
  lost->clear();
  for (size_t r = 0; r < alive.size(); ++r) {
    if (alive[r]) continue;
    if (lost->empty()) {
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
    lost->push_back(workers_[r].id);
  }
  return st;
}

absl::Status Attempt::Prepare(int64_t* num_train, int64_t* num_test) {
  const v1::JobSpec& spec = job_.spec();
  ASSIGN_OR_RETURN(std::vector<PrepareResult> resp, PrepareRanks());
  for (int r = 0; r < static_cast<int>(resp.size()); ++r) {
    if (resp[r].train_examples != resp[0].train_examples ||
        resp[r].test_examples != resp[0].test_examples) {
      return WorkerError(
          r, absl::FailedPreconditionError(absl::StrCat(
                 "its dataset at ", DatasetLocation(spec.dataset()), " has ",
                 resp[r].train_examples, "/", resp[r].test_examples, " examples; rank 0's has ",
                 resp[0].train_examples, "/", resp[0].test_examples)));
    }
  }
  *num_train = resp[0].train_examples;
  *num_test = resp[0].test_examples;
  if (*num_train < spec.global_batch_size()) {
    return absl::InvalidArgumentError(absl::StrCat("global_batch_size: ", spec.global_batch_size(),
                                                   " exceeds the ", *num_train,
                                                   " training examples"));
  }
  // Submit assumed an MNIST-sized dataset; now its size is known.
  RETURN_IF_ERROR(CheckMemoryBudget(spec, job_.options().memory, {*num_train, *num_test}));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<PrepareResult>> Attempt::PrepareRanks() {
  ASSIGN_OR_RETURN(std::shared_ptr<const SharedState> state, job_.StartState());
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
  const Start& start = job_.start();
  const v1::JobSpec& spec = job_.spec();
  const CoordinatorOptions& options = job_.options();
  const int n = static_cast<int>(workers_.size());
  // A namespace per attempt: a recovery's ranks never meet the lost attempt's keys. Its
  // random part is known only to the ranks (it travels in Prepare, over mutual TLS), so
  // no other registry client can read or pre-write the job's keys.
  const std::string prefix =
      absl::StrCat("jobs/", job_.id(), "/", number_, "-", RandomHex(16), "/");
  job_.sink()->OnRendezvous(prefix, workers_);
  RankCalls<absl::StatusOr<PrepareResult>> calls(n);
  for (int r = 0; r < n; ++r) {
    JobAssignment assignment;
    assignment.job_id = job_.id();
    assignment.replica = {spec, r, n, options.collective_timeout};
    if (job_.logical()) {
      const ReplicaRange range = RangeOf(r, n, LogicalWorld(spec));
      assignment.replica.logical_replicas = LogicalWorld(spec);
      assignment.replica.logical_first = range.first;
      assignment.replica.logical_count = range.count;
    }
    assignment.rendezvous_prefix = prefix;
    assignment.keep_state = start.kept && r < start.kept_ranks;
    std::shared_ptr<const SharedState> sent = assignment.keep_state ? header_only : state;
    WorkerClient* client = clients_[r].get();
    std::function<void(const absl::StatusOr<PrepareResult>&)> seen;
    if (start.kept) {
      // A resize that cannot be: the others stop waiting for this rank in the rendezvous.
      seen = [cancel = cancel_, r](const absl::StatusOr<PrepareResult>& got) {
        if (!got.ok() && !absl::IsCancelled(got.status())) {
          cancel->Cancel(absl::AbortedError(absl::StrCat(
              "rank ", r, " could not continue the resize: ", got.status().message())));
        }
      };
    }
    calls.Start(
        r,
        [&](RankCalls<absl::StatusOr<PrepareResult>>::Done done) {
          return client->StartPrepare(assignment, sent, cancel_, options.prepare_timeout,
                                      std::move(done));
        },
        [client, assignment, sent, cancel = cancel_, timeout = options.prepare_timeout] {
          return client->Prepare(assignment, sent, *cancel, timeout);
        },
        std::move(seen));
  }
  std::vector<absl::StatusOr<PrepareResult>> resp =
      calls.Wait(options.prepare_timeout + kAnswerMargin);
  if (start.kept) {
    RETURN_IF_ERROR(CheckKeptStates(resp));
    ASSIGN_OR_RETURN(const bool again, CatchUp(resp));
    if (again) return PrepareRanks();  // every rank at the step some were at: it agrees now
  }
  std::vector<PrepareResult> out;
  for (int r = 0; r < n; ++r) {
    if (!resp[r].ok()) return WorkerError(r, resp[r].status());
    if (!start.kept && resp[r]->param_checksum != checksum) {
      return WorkerError(r, absl::DataLossError("replicated params arrived corrupted"));
    }
    out.push_back(*std::move(resp[r]));
  }
  return out;
}

absl::StatusOr<v1::EvalResult> Attempt::Evaluate(int64_t num_test, int64_t step, int64_t epoch) {
  const int n = static_cast<int>(workers_.size());
  // Logical replicas: one part of the test split per replica, added in replica order.
  const int v = job_.logical() ? LogicalWorld(job_.spec()) : n;
  // Every part at once. A worker holding several (logical replicas) evaluates them one at
  // a time (its job's calls take turns): each part's call has the time of all its parts.
  const int most = (v + n - 1) / n;
  const absl::Duration timeout =
      (job_.options().rpc_timeout + absl::Seconds(num_test / 100)) * most;
  RankCalls<absl::StatusOr<EvalSums>> calls(v);
  for (int p = 0; p < v; ++p) {
    WorkerClient* client = clients_[OwnerOf(p, n, v)].get();
    const EvalPart part = EvalPartOf(num_test, p, v);
    calls.Start(
        p,
        [&](RankCalls<absl::StatusOr<EvalSums>>::Done done) {
          return client->StartEvaluate(job_.id(), part.begin, part.end, cancel_, timeout,
                                       std::move(done));
        },
        [client, id = job_.id(), part, cancel = cancel_, timeout] {
          return client->Evaluate(id, part.begin, part.end, *cancel, timeout);
        });
  }
  std::vector<absl::StatusOr<EvalSums>> resp = calls.Wait(timeout + kAnswerMargin);
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

absl::StatusOr<TrainState> Attempt::FetchChecked(int64_t step, uint64_t checksum,
                                                 absl::string_view what) {
  ASSIGN_OR_RETURN(TrainState state,
                   clients_[0]->FetchState(job_.id(), *cancel_, job_.options().rpc_timeout));
  if ((step >= 0 && state.step != step) ||
      ParamChecksum(state.params, state.batch_stats) != checksum) {
    return WorkerError(0, absl::DataLossError(what));
  }
  return state;
}

}  // namespace lockstep
