#include "services/coordinator/job_runner.h"

#include <google/protobuf/util/json_util.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/checkpoint.h"
#include "core/status_macros.h"

namespace lockstep {
namespace {

constexpr absl::Duration kStreamLifetime = absl::Hours(24 * 30);
// A health check after a failure, to tell the dead worker from its peers.
constexpr absl::Duration kAliveTimeout = absl::Seconds(2);

// Runs f(r) for every rank on its own thread and waits for all.
template <typename F>
void ForEachRank(int n, F f) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&f, r] { f(r); });
  for (auto& t : threads) t.join();
}

std::string KeyHex(rng::Key k) { return absl::StrFormat("%08x%08x", k.k0, k.k1); }

}  // namespace

JobRunner::JobRunner(std::string job_id, v1::JobSpec spec, std::vector<PoolWorker> workers,
                     WorkerClientFactory* factory, const CoordinatorOptions& options, JobSink* sink)
    : job_id_(std::move(job_id)),
      spec_(std::move(spec)),
      workers_(std::move(workers)),
      options_(options),
      sink_(sink) {
  for (const PoolWorker& w : workers_) clients_.push_back(factory->Connect(w.address));
}

absl::Status JobRunner::WorkerError(int rank, const absl::Status& st) const {
  const PoolWorker& w = workers_[rank];
  return absl::Status(st.code(), absl::StrCat("worker ", w.id, " (", w.address, ", rank ", rank,
                                              "): ", st.message()));
}

std::vector<bool> JobRunner::Probe() {
  const int n = static_cast<int>(clients_.size());
  std::vector<char> alive(n);
  ForEachRank(n, [&](int r) { alive[r] = clients_[r]->Alive(kAliveTimeout); });
  return {alive.begin(), alive.end()};
}

absl::Status JobRunner::Run(JobOutcome* outcome) {
  absl::Status st = Train(outcome);
  std::vector<bool> alive(clients_.size(), true);
  if (absl::Status why = cancel_.status(); !why.ok()) {
    st = why;  // aborted: say why, and waste no time probing
  } else if (!st.ok()) {
    // Name the dead: a lost worker makes its peers' collectives fail too.
    alive = Probe();
    for (size_t r = 0; r < alive.size(); ++r) {
      if (alive[r]) continue;
      if (outcome->unreachable.empty()) {
        st = WorkerError(static_cast<int>(r), absl::UnavailableError(absl::StrCat(
                                                  "is unreachable; first error: ", st.message())));
      }
      outcome->unreachable.push_back(workers_[r].id);
    }
  }
  ReleaseAll(st.ok() ? "job finished" : std::string(st.message()), alive);
  // Sticky: an abort that arrived before the job's end wins, whatever came after it.
  if (absl::Status why = cancel_.status(); !why.ok()) return why;
  return st;
}

absl::Status JobRunner::Train(JobOutcome* outcome) {
  int64_t num_train = 0, num_test = 0;
  RETURN_IF_ERROR(Prepare(&num_train, &num_test));
  TrainingPlan plan(spec_.seed(), spec_.dropout_seed(), setup_->impl, num_train,
                    static_cast<int>(spec_.global_batch_size()), static_cast<int>(workers_.size()));
  const int64_t total = TotalSteps(spec_, num_train);
  RETURN_IF_ERROR(StepLoop(plan, total, num_test, outcome));
  ASSIGN_OR_RETURN(v1::EvalResult final_eval,
                   Evaluate(num_test, total, (total - 1) / plan.steps_per_epoch()));
  sink_->OnEval(final_eval);

  std::string path = spec_.checkpoint_path();
  if (path.empty() && !options_.checkpoint_dir.empty()) path = job_id_ + ".safetensors";
  if (path.empty()) return absl::OkStatus();
  if (!options_.checkpoint_dir.empty()) path = options_.checkpoint_dir + "/" + path;
  RETURN_IF_ERROR(SaveCheckpoint(path, outcome->param_checksum, plan.data_key(), plan.main_key()));
  outcome->checkpoint_path = std::filesystem::absolute(path).string();
  return absl::OkStatus();
}

void JobRunner::ReleaseAll(const std::string& reason, const std::vector<bool>& alive) {
  ForEachRank(static_cast<int>(clients_.size()), [&](int r) {
    if (alive[r]) clients_[r]->Release(job_id_, reason, options_.release_timeout).IgnoreError();
  });
}

absl::Status JobRunner::Prepare(int64_t* num_train, int64_t* num_test) {
  ASSIGN_OR_RETURN(setup_, SetupFromSpec(spec_));
  // The host initializes the TrainState and replicates it (the seed program), serialized
  // once for every rank.
  auto state = std::make_shared<SharedState>();
  uint64_t checksum = 0;
  {
    const std::vector<float> params =
        setup_->model.Init(TrainingPlan::InitKey(spec_.seed(), setup_->impl), setup_->impl);
    checksum = ParamChecksum(params);
    const auto slots = static_cast<uint32_t>(setup_->optimizer.slots().size());
    state->header = {0, params.size(), slots};
    state->bytes = InitialStateBytes(params, slots);
  }
  const int n = static_cast<int>(workers_.size());
  std::vector<absl::StatusOr<PrepareResult>> resp(n, absl::UnknownError("not run"));
  ForEachRank(n, [&](int r) {
    JobAssignment job;
    job.job_id = job_id_;
    job.replica = {spec_, r, n, options_.collective_timeout};
    job.rendezvous_prefix = absl::StrCat("jobs/", job_id_, "/");
    resp[r] = clients_[r]->Prepare(job, state, cancel_, options_.prepare_timeout);
  });
  for (int r = 0; r < n; ++r) {
    if (!resp[r].ok()) return WorkerError(r, resp[r].status());
  }
  for (int r = 0; r < n; ++r) {
    if (resp[r]->param_checksum != checksum) {
      return WorkerError(r, absl::DataLossError("replicated params arrived corrupted"));
    }
    if (resp[r]->train_examples != resp[0]->train_examples ||
        resp[r]->test_examples != resp[0]->test_examples) {
      return WorkerError(
          r, absl::FailedPreconditionError(absl::StrCat(
                 "its dataset at ", spec_.dataset().path(), " has ", resp[r]->train_examples, "/",
                 resp[r]->test_examples, " examples; rank 0's has ", resp[0]->train_examples, "/",
                 resp[0]->test_examples)));
    }
  }
  *num_train = resp[0]->train_examples;
  *num_test = resp[0]->test_examples;
  if (*num_train < spec_.global_batch_size()) {
    return absl::InvalidArgumentError(absl::StrCat("global_batch_size: ", spec_.global_batch_size(),
                                                   " exceeds the ", *num_train,
                                                   " training examples"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StepCommand>> JobRunner::StepCommands(const StepPlan& p,
                                                                 bool want_checksum) const {
  ASSIGN_OR_RETURN(auto shards, ShardBatch(p.indices, static_cast<int>(workers_.size())));
  std::vector<StepCommand> commands(shards.size());
  for (size_t r = 0; r < shards.size(); ++r) {
    commands[r] = {p.step, p.keys[r], shards[r], want_checksum};
  }
  return commands;
}

absl::StatusOr<v1::StepEvent> JobRunner::Aggregate(const std::vector<StepResult>& got, int64_t step,
                                                   bool check) const {
  v1::StepEvent e;
  float loss_sum = 0, acc_sum = 0;
  for (size_t r = 0; r < got.size(); ++r) {
    if (check && got[r].param_checksum != got[0].param_checksum) {
      return absl::DataLossError(absl::StrFormat(
          "replicas diverged after step %d: worker %s has params checksum "
          "%016x, worker %s has %016x",
          step + 1, workers_[0].id, got[0].param_checksum, workers_[r].id, got[r].param_checksum));
    }
    loss_sum += got[r].loss;
    acc_sum += got[r].accuracy;
    e.add_local_losses(got[r].loss);
    // The slowest worker's time split.
    e.set_worker_step_ms(std::max(e.worker_step_ms(), got[r].step_ms));
    e.set_compute_ms(std::max(e.compute_ms(), got[r].compute_ms));
    e.set_allreduce_ms(std::max(e.allreduce_ms(), got[r].allreduce_ms));
    e.set_update_ms(std::max(e.update_ms(), got[r].update_ms));
  }
  const float n = static_cast<float>(got.size());
  e.set_loss(loss_sum / n);  // jnp.mean of the local losses
  e.set_accuracy(acc_sum / n);
  return e;
}

absl::Status JobRunner::StepLoop(TrainingPlan& plan, int64_t total, int64_t num_test,
                                 JobOutcome* outcome) {
  const int64_t b = spec_.global_batch_size();
  const int64_t spe = plan.steps_per_epoch();
  sink_->OnRunning(total);
  ASSIGN_OR_RETURN(
      std::unique_ptr<StepFanout> fanout,
      StepFanout::Open(clients_, job_id_, cancel_, kStreamLifetime,
                       [this](int r, const absl::Status& st) { return WorkerError(r, st); }));
  auto checksum_due = [&](int64_t done) {
    return done == total ||
           (spec_.checksum_every_steps() > 0 && done % spec_.checksum_every_steps() == 0);
  };
  int64_t sent = 0, done = 0;
  bool hold = false;  // the pipeline drains before an evaluation
  double step_seconds = 0;
  auto t_last = std::chrono::steady_clock::now();
  while (done < total) {
    RETURN_IF_ERROR(cancel_.status());
    while (sent < total && sent - done < options_.steps_in_flight && !hold) {
      const StepPlan p = plan.Next();  // the commands' indices point into it until sent
      ASSIGN_OR_RETURN(auto commands, StepCommands(p, checksum_due(sent + 1)));
      fanout->Send(commands);
      ++sent;
      hold = EvalDue(spec_.eval(), sent, spe) && sent < total;
    }
    ASSIGN_OR_RETURN(std::vector<StepResult> got, fanout->Take(done, options_.step_timeout));
    ASSIGN_OR_RETURN(v1::StepEvent e, Aggregate(got, done, checksum_due(done + 1)));
    ++done;
    const auto now = std::chrono::steady_clock::now();
    const double wall = std::chrono::duration<double>(now - t_last).count();
    step_seconds += wall;
    t_last = now;
    if (checksum_due(done)) outcome->param_checksum = got[0].param_checksum;
    e.set_wall_ms(wall * 1000);
    e.set_step(done);
    e.set_epoch((done - 1) / spe);
    e.set_samples_per_sec(done * b / step_seconds);
    e.set_eta_sec((total - done) * step_seconds / done);
    e.set_total_steps(total);
    sink_->OnStep(e);
    if (hold && done == sent) {
      ASSIGN_OR_RETURN(v1::EvalResult eval, Evaluate(num_test, done, (done - 1) / spe));
      sink_->OnEval(eval);
      hold = false;
      t_last = std::chrono::steady_clock::now();  // evaluation is not step time
    }
  }
  RETURN_IF_ERROR(fanout->Close(options_.step_timeout));
  outcome->train_seconds = step_seconds;
  outcome->samples_per_sec = step_seconds > 0 ? total * b / step_seconds : 0;
  return absl::OkStatus();
}

absl::StatusOr<v1::EvalResult> JobRunner::Evaluate(int64_t num_test, int64_t step, int64_t epoch) {
  const int n = static_cast<int>(workers_.size());
  std::vector<absl::StatusOr<EvalSums>> resp(n, absl::UnknownError("not run"));
  ForEachRank(n, [&](int r) {
    resp[r] = clients_[r]->Evaluate(job_id_, num_test * r / n, num_test * (r + 1) / n, cancel_,
                                    options_.rpc_timeout + absl::Seconds(num_test / 100));
  });
  EvalSums sum;
  for (int r = 0; r < n; ++r) {
    if (!resp[r].ok()) return WorkerError(r, resp[r].status());
    sum.loss_sum += resp[r]->loss_sum;
    sum.correct += resp[r]->correct;
    sum.count += resp[r]->count;
  }
  v1::EvalResult out;
  out.set_step(step);
  out.set_epoch(epoch);
  out.set_examples(sum.count);
  out.set_test_loss(sum.count > 0 ? sum.loss_sum / sum.count : 0);
  out.set_test_accuracy(sum.count > 0 ? static_cast<double>(sum.correct) / sum.count : 0);
  return out;
}

absl::Status JobRunner::SaveCheckpoint(const std::string& path, uint64_t checksum,
                                       rng::Key data_key, rng::Key main_key) {
  ASSIGN_OR_RETURN(TrainState state,
                   clients_[0]->FetchState(job_id_, cancel_, options_.rpc_timeout));
  if (ParamChecksum(state.params) != checksum) {
    return WorkerError(0,
                       absl::DataLossError("fetched params do not match the replicas' checksum"));
  }
  std::string spec_json;
  (void)google::protobuf::util::MessageToJsonString(spec_, &spec_json);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  return WriteCheckpoint(path, setup_->model, setup_->optimizer, state,
                         {{"job_id", job_id_},
                          {"spec", spec_json},
                          {"rng_impl", spec_.rng_impl()},
                          {"data_key", KeyHex(data_key)},
                          {"main_key", KeyHex(main_key)},
                          {"param_checksum", absl::StrFormat("%016x", checksum)}});
}

}  // namespace lockstep
