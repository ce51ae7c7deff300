// Job (job.h): where a job's state comes from and where it goes: the start of an attempt
// (step 0, the latest snapshot, spec.resume_from, or the workers' own after a resize), the
// snapshots taken at the spec's cadence, their metadata, the final checkpoint, and the
// steps reported to the sink.
#include "services/coordinator/jobs/job.h"

#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/checkpoint.h"
#include "core/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "services/common/observability/job_log.h"
#include "services/common/rpc/job_state.h"

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

Job::Job(std::string id, v1::JobSpec spec, const CoordinatorOptions& options, JobSink* sink,
         bool recovers, bool resume)
    : id_(std::move(id)),
      spec_(std::move(spec)),
      options_(options),
      sink_(sink),
      recovers_(recovers),
      resume_(resume),
      folder_(options.checkpoint_dir, options.snapshot_dir),
      snapshots_(options.snapshot_dir.empty() ? "" : options.snapshot_dir + "/" + id_,
                 static_cast<int>(spec_.recovery().snapshots_kept())) {}

absl::Status Job::Begin() {
  ASSIGN_OR_RETURN(setup_, SetupFromSpec(spec_));
  last_snapshot_time_ = options_.clock->Now();
  // Where the checkpoint goes must take it: found out now, not after the training. On a
  // coordinator a job writes in its own folder and never over a file; a resumed one (a
  // restarted coordinator's) may find its own. (`lockstep train` writes the user's path.)
  ASSIGN_OR_RETURN(checkpoint_path_,
                   folder_.PrepareCheckpoint(id_, spec_.checkpoint_path(), resume_));
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

absl::Status Job::ResumeFrom() {
  ASSIGN_OR_RETURN(ResumeSource source, folder_.ResolveResumeFrom(spec_.resume_from()));
  absl::StatusOr<StartingPoint> start =
      folder_.ReadResumeSource(&source, setup_->model, setup_->optimizer, id_);
  const std::string& path = source.path;
  if (!start.ok()) {
    return absl::Status(start.status().code(),
                        absl::StrCat("resume_from: ", start.status().message()));
  }
  if (!start->params_only && !start->digested) {
    LogJob(spdlog::level::warn, {id_},
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
  LogJob(spdlog::level::info, {id_},
         absl::StrCat("starts from ", path, " at step ", start_.step,
                      start->params_only ? " (params only: fine-tuning)" : ""));
  start_.held = std::move(start->state);
  return absl::OkStatus();
}

void Job::KeepState(Start kept) {
  kept.kept = true;
  if (!start_.kept) fallback_ = std::move(start_);  // a resize that fails goes back to it
  start_ = std::move(kept);
}

void Job::FallBack() {
  if (!start_.kept || !fallback_.has_value()) return;
  start_ = *std::move(fallback_);
  fallback_.reset();
  ahead_.clear();  // replayed from the snapshot instead
}

absl::StatusOr<std::shared_ptr<const SharedState>> Job::StartState() {
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
      return absl::DataLossError(absl::StrCat("the snapshot of step ", start_.step, " of job ", id_,
                                              " is gone from ", options_.snapshot_dir));
    }
    loaded = std::move(latest->state);
  }
  const TrainState& s = start_.held.has_value() ? *start_.held : *loaded;
  state->header = {s.step, s.params.size(), slots, s.batch_stats.size()};
  state->bytes = StateBytes(s);
  return state;
}

absl::Status Job::CheckStartKeys(const TrainingPlan& plan) const {
  if (start_.data_key.empty()) return absl::OkStatus();  // step 0, or params only
  if (start_.data_key != KeyHex(plan.data_key()) || start_.main_key != KeyHex(plan.main_key())) {
    return absl::DataLossError(
        absl::StrCat("the snapshot of step ", start_.step, " does not match this job's RNG plan"));
  }
  return absl::OkStatus();
}

bool Job::SnapshotDue(int64_t after, int64_t total, absl::Time now) const {
  const v1::RecoverySpec& recovery = spec_.recovery();
  return recovers_ && after < total &&
         (after - last_snapshot_step_ >= static_cast<int64_t>(recovery.snapshot_every_steps()) ||
          now - last_snapshot_time_ >= absl::Seconds(recovery.snapshot_every_seconds()));
}

void Job::KeepSnapshot(TrainState state, uint64_t checksum, const TrainingPlan& plan) {
  const int64_t step = state.step;
  KeepSnapshot(std::move(state), checksum, Metadata(checksum, plan, step));
}

void Job::SnapshotTaken(int64_t step) {
  last_snapshot_step_ = step;
  last_snapshot_time_ = options_.clock->Now();
}

void Job::KeepSnapshot(TrainState state, uint64_t checksum,
                       const std::map<std::string, std::string>& metadata) {
  const int64_t step = state.step;
  start_ = Start{};
  start_.step = step;
  start_.data_key = metadata.at("data_key");
  start_.main_key = metadata.at("main_key");
  fallback_.reset();  // a resized attempt's snapshot: the start from now on
  // On disk for a restarted coordinator (a recovery reads it back); held here where there
  // is no disk for it, or the disk refused it.
  absl::Status written = snapshots_.enabled()
                             ? snapshots_.Write(setup_->model, setup_->optimizer, state, metadata)
                             : absl::FailedPreconditionError("no snapshot directory");
  if (!written.ok()) {
    if (snapshots_.enabled())
      LogJob(spdlog::level::warn, {id_}, "snapshot kept in memory: " + written.ToString());
    start_.held = std::move(state);
  }
  SnapshotTaken(step);
  sink_->OnSnapshot(step, checksum, start_.held.has_value());
}

std::map<std::string, std::string> Job::Metadata(uint64_t checksum, const TrainingPlan& plan,
                                                 int64_t step) const {
  std::string spec_json;
  (void)google::protobuf::util::MessageToJsonString(spec_, &spec_json);
  return {{"job_id", id_},
          {"spec", spec_json},
          {"rng_impl", spec_.rng_impl()},
          {"data_key", KeyHex(plan.data_key())},
          {"main_key", KeyHex(plan.main_key())},
          {"epoch", absl::StrCat(step / plan.steps_per_epoch())},  // of the next step
          {"param_checksum", absl::StrFormat("%016x", checksum)}};
}

void Job::SaveCheckpoint(TrainState state, uint64_t checksum, const TrainingPlan& plan) {
  const std::string& path = checkpoint_path_;
  const std::map<std::string, std::string> metadata = Metadata(checksum, plan, state.step);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const absl::Status written =
      WriteCheckpoint(path, setup_->model, setup_->optimizer, state, metadata);
  if (written.ok()) {
    outcome_.checkpoint_path = std::filesystem::absolute(path).string();
    return;
  }
  // A full disk must not lose the result: kept to write later (pending_checkpoint.h).
  outcome_.checkpoint_pending = std::string(written.message());
  outcome_.pending = KeepFinalState(id_, spec_, path, std::move(state), metadata, written,
                                    snapshots_, setup_->model, setup_->optimizer);
}

void Job::Succeeded() {
  // The checkpoint holds the end; a pending one's state is in the newest snapshot.
  if (outcome_.pending == nullptr) snapshots_.Clear();
}

bool Job::ReportStep(v1::StepEvent e, int64_t step, int64_t total, int64_t spe) {
  const bool replay = step <= high_water_;
  if (replay) e.set_replay(true);  // a step run again since the snapshot: `watch` shows it so
  high_water_ = std::max(high_water_, step);
  e.set_step(step);
  e.set_epoch((step - 1) / spe);
  e.set_total_steps(total);
  sink_->OnStep(e);
  return replay;
}

}  // namespace lockstep
