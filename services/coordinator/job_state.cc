// JobRunner, where a job's state comes from and where it goes: the start of an attempt
// (step 0, the latest snapshot, or spec.resume_from), the snapshots taken at the spec's
// cadence, their metadata, and the final checkpoint. The loop itself is job_runner.cc.
#include "services/common/job_state.h"

#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/checkpoint.h"
#include "core/io/durable_file.h"
#include "core/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "services/common/job_log.h"
#include "services/coordinator/job_runner.h"

namespace lockstep {
namespace {

std::string KeyHex(rng::Key k) { return absl::StrFormat("%08x%08x", k.k0, k.k1); }

// Whether a job with spec `ours` continues the trajectory of a state saved by `theirs`.
absl::Status SameTrajectory(const v1::JobSpec& theirs, const v1::JobSpec& ours,
                            const std::string& path) {
  using google::protobuf::util::MessageDifferencer;
  auto differ = [&](const std::string& field, const std::string& a, const std::string& b) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resume_from: ", path, " was saved by a job with ", field, " ", a, "; this job has ", b,
        " (to start from its params with other settings, use a params-only file)"));
  };
  if (!MessageDifferencer::Equals(theirs.model(), ours.model())) {
    return differ("model", theirs.model().ShortDebugString(), ours.model().ShortDebugString());
  }
  if (!MessageDifferencer::Equals(theirs.optimizer(), ours.optimizer())) {
    return differ("optimizer", theirs.optimizer().ShortDebugString(),
                  ours.optimizer().ShortDebugString());
  }
  if (theirs.global_batch_size() != ours.global_batch_size()) {
    return differ("global_batch_size", absl::StrCat(theirs.global_batch_size()),
                  absl::StrCat(ours.global_batch_size()));
  }
  if (theirs.seed() != ours.seed() || theirs.dropout_seed() != ours.dropout_seed()) {
    return differ("seed/dropout_seed", absl::StrCat(theirs.seed(), "/", theirs.dropout_seed()),
                  absl::StrCat(ours.seed(), "/", ours.dropout_seed()));
  }
  if (theirs.rng_impl() != ours.rng_impl()) {
    return differ("rng_impl", theirs.rng_impl(), ours.rng_impl());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status JobRunner::Begin() {
  ASSIGN_OR_RETURN(setup_, SetupFromSpec(spec_));
  last_snapshot_time_ = absl::Now();
  // Where the checkpoint goes must take it: found out now, not after the training. On a
  // coordinator a job writes in its own folder and never over a file; a resumed one (a
  // restarted coordinator's) may find its own. (`lockstep train` writes the user's path.)
  ASSIGN_OR_RETURN(checkpoint_path_,
                   folder_.PrepareCheckpoint(job_id_, spec_.checkpoint_path(), resume_));
  if (resume_ && snapshots_.enabled()) {
    ASSIGN_OR_RETURN(std::optional<Snapshot> latest,
                     snapshots_.Latest(setup_->model, setup_->optimizer));
    if (latest.has_value()) {
      start_.step = latest->state.step;
      start_.data_key = latest->metadata["data_key"];
      start_.main_key = latest->metadata["main_key"];
      last_snapshot_step_ = start_.step;
      high_water_ = std::max(high_water_, start_.step);
      return absl::OkStatus();
    }
  }
  if (!spec_.resume_from().empty()) return ResumeFrom();
  return absl::OkStatus();  // from step 0
}

absl::Status JobRunner::ResumeFrom() {
  ASSIGN_OR_RETURN(ResumeSource source, folder_.ResolveResumeFrom(spec_.resume_from()));
  absl::StatusOr<StartingPoint> start =
      folder_.ReadResumeSource(&source, setup_->model, setup_->optimizer, job_id_);
  const std::string& path = source.path;
  if (!start.ok()) {
    return absl::Status(start.status().code(),
                        absl::StrCat("resume_from: ", start.status().message()));
  }
  if (!start->params_only && !start->digested) {
    LogJob(spdlog::level::warn, {job_id_},
           absl::StrCat("resume_from: ", path,
                        " has no digests (written by an older Lockstep): its optimizer state "
                        "cannot be checked"));
  }
  // A snapshot's or checkpoint's checksum covers the params' (and batch_stats') bytes,
  // which the file's header does not.
  auto sum = start->metadata.find("param_checksum");
  if (sum != start->metadata.end() &&
      sum->second !=
          absl::StrFormat("%016x", ParamChecksum(start->state.params, start->state.batch_stats))) {
    return absl::DataLossError(absl::StrCat(
        "resume_from: ", path, ": the params do not match their checksum ", sum->second));
  }
  if (!start->params_only) {
    // Bit for bit only with the trajectory's own settings; the RNG keys are checked
    // against the plan when the attempt starts.
    v1::JobSpec theirs;
    if (!google::protobuf::util::JsonStringToMessage(start->metadata["spec"], &theirs).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("resume_from: ", path, " has no readable spec in its metadata"));
    }
    RETURN_IF_ERROR(SameTrajectory(theirs, spec_, path));
    start_.data_key = start->metadata["data_key"];
    start_.main_key = start->metadata["main_key"];
  }
  start_.step = start->state.step;
  LogJob(spdlog::level::info, {job_id_},
         absl::StrCat("starts from ", path, " at step ", start_.step,
                      start->params_only ? " (params only: fine-tuning)" : ""));
  start_.held = std::move(start->state);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const SharedState>> JobRunner::StartState() {
  auto state = std::make_shared<SharedState>();
  const auto slots = static_cast<uint32_t>(setup_->optimizer.slots().size());
  if (start_.kept && !start_.held.has_value()) {  // the workers hold it: its shape only
    state->header = {start_.step, setup_->model.layout().total(), slots,
                     setup_->model.stats_layout().total()};
    return state;
  }
  if (start_.step == 0 && !start_.held.has_value()) {
    // The host initializes the TrainState (the seed program), serialized once for every rank.
    const std::vector<float> params =
        setup_->model.Init(TrainingPlan::InitKey(spec_.seed(), setup_->impl), setup_->impl);
    const std::vector<float> stats = setup_->model.InitStats();
    state->header = {0, params.size(), slots, stats.size()};
    state->bytes = InitialStateBytes(params, slots, stats);
    return state;
  }
  std::optional<TrainState> loaded;
  if (!start_.held.has_value()) {
    ASSIGN_OR_RETURN(std::optional<Snapshot> latest,
                     snapshots_.Latest(setup_->model, setup_->optimizer));
    if (!latest.has_value() || latest->state.step != start_.step) {
      return absl::DataLossError(absl::StrCat("the snapshot of step ", start_.step, " of job ",
                                              job_id_, " is gone from ", options_.snapshot_dir));
    }
    loaded = std::move(latest->state);
  }
  const TrainState& s = start_.held.has_value() ? *start_.held : *loaded;
  state->header = {s.step, s.params.size(), slots, s.batch_stats.size()};
  state->bytes = StateBytes(s);
  return state;
}

absl::Status JobRunner::CheckStartKeys(const TrainingPlan& plan) const {
  if (start_.data_key.empty()) return absl::OkStatus();  // step 0, or params only
  if (start_.data_key != KeyHex(plan.data_key()) || start_.main_key != KeyHex(plan.main_key())) {
    return absl::DataLossError(
        absl::StrCat("the snapshot of step ", start_.step, " does not match this job's RNG plan"));
  }
  return absl::OkStatus();
}

absl::Status JobRunner::TakeSnapshot(int64_t step, uint64_t checksum, const TrainingPlan& plan) {
  ASSIGN_OR_RETURN(TrainState state,
                   clients_[0]->FetchState(job_id_, *attempt(), options_.rpc_timeout));
  if (state.step != step || ParamChecksum(state.params, state.batch_stats) != checksum) {
    return WorkerError(
        0, absl::DataLossError(absl::StrCat("the state fetched for the snapshot of step ", step,
                                            " does not match the replicas' checksum")));
  }
  const std::map<std::string, std::string> metadata = Metadata(checksum, plan, step);
  start_.step = step;
  start_.data_key = metadata.at("data_key");
  start_.main_key = metadata.at("main_key");
  start_.held.reset();
  start_.kept = false;  // a resized attempt's snapshot: the start from now on
  start_.checksum = 0;
  fallback_.reset();
  // On disk for a restarted coordinator (a recovery reads it back); held here where there
  // is no disk for it, or the disk refused it.
  absl::Status written = snapshots_.enabled()
                             ? snapshots_.Write(setup_->model, setup_->optimizer, state, metadata)
                             : absl::FailedPreconditionError("no snapshot directory");
  if (!written.ok()) {
    if (snapshots_.enabled())
      LogJob(spdlog::level::warn, {job_id_}, "snapshot kept in memory: " + written.ToString());
    start_.held = std::move(state);
  }
  last_snapshot_step_ = step;
  last_snapshot_time_ = absl::Now();
  sink_->OnSnapshot(step, checksum, start_.held.has_value());
  return absl::OkStatus();
}

std::map<std::string, std::string> JobRunner::Metadata(uint64_t checksum, const TrainingPlan& plan,
                                                       int64_t step) const {
  std::string spec_json;
  (void)google::protobuf::util::MessageToJsonString(spec_, &spec_json);
  return {{"job_id", job_id_},
          {"spec", spec_json},
          {"rng_impl", spec_.rng_impl()},
          {"data_key", KeyHex(plan.data_key())},
          {"main_key", KeyHex(plan.main_key())},
          {"epoch", absl::StrCat(step / plan.steps_per_epoch())},  // of the next step
          {"param_checksum", absl::StrFormat("%016x", checksum)}};
}

absl::Status JobRunner::SaveCheckpoint(const std::string& path, uint64_t checksum,
                                       const TrainingPlan& plan, JobOutcome* outcome) {
  ASSIGN_OR_RETURN(TrainState state,
                   clients_[0]->FetchState(job_id_, *attempt(), options_.rpc_timeout));
  if (ParamChecksum(state.params, state.batch_stats) != checksum) {
    return WorkerError(0,
                       absl::DataLossError("fetched params do not match the replicas' checksum"));
  }
  const std::map<std::string, std::string> metadata = Metadata(checksum, plan, state.step);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const absl::Status written =
      WriteCheckpoint(path, setup_->model, setup_->optimizer, state, metadata);
  if (written.ok()) return written;
  // A full disk must not lose the result: kept to write later (pending_checkpoint.h).
  outcome->checkpoint_pending = std::string(written.message());
  outcome->pending = KeepFinalState(job_id_, spec_, path, std::move(state), metadata, written,
                                    snapshots_, setup_->model, setup_->optimizer);
  return absl::OkStatus();
}

}  // namespace lockstep
